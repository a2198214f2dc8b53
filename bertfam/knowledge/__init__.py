"""K-BERT: knowledge graphs from .spo triples and the sentence-tree input encoder."""
from .encoder import KBertEncoder  # noqa: F401
from .graph import KnowledgeGraph  # noqa: F401
