"""bertfam.evaluation."""
