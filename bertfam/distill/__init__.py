"""TinyBERT distillation: losses, the student+teacher module, general and task-specific pipelines."""
from .losses import attention_mse, hidden_mse, soft_cross_entropy, uniform_layer_map  # noqa: F401
from .model import DistillConfig, DistillModel  # noqa: F401
