"""bertfam.data."""
