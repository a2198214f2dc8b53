"""The one bertfam encoder: embeddings -> (shared) transformer layers -> pooler, plus heads.

This package never imports training, tasks, serving or the CLI.
"""
from .model import BertfamModel, ModelOutput, TaskModel, build_model, set_attention_dropout  # noqa: F401
