"""K-BERT: knowledge graphs from .spo triples and the model inputs built from a sentence tree."""
from .graph import KnowledgeGraph  # noqa: F401
from .inputs import KBertInputBuilder  # noqa: F401

