"""bertfam.tasks."""
