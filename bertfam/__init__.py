"""bertfam: BERT and its family (RoBERTa, ALBERT, ERNIE, TinyBERT, K-BERT) on one encoder."""
from .config import HeadConfig, ModelConfig, preset, preset_names  # noqa: F401
from .errors import (BertfamError, CheckpointError, ConfigError, DataError, TokenizerError,  # noqa: F401
                     UnsupportedError)
from .checkpoint import from_pretrained  # noqa: F401
from .modeling import BertfamModel, ModelOutput, TaskModel, build_model  # noqa: F401
from .modeling.optimize import optimize_for_inference  # noqa: F401
from .tasks.kinds import pipeline  # noqa: F401
from .tokenization import Tokenizer  # noqa: F401

__version__ = "0.1.0"
