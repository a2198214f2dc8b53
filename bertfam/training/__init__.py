"""The one training loop of bertfam (pre-training, fine-tuning, MRC, distillation)."""
from .optim import linear_schedule, param_groups  # noqa: F401
from .sampling import BatchPlan, length_grouped_batches  # noqa: F401
from .trainer import TrainConfig, Trainer, TrainerCallback  # noqa: F401
