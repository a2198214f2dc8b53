"""Pre-training objectives: masking strategies, instance builders (NSP / SOP / FULL-SENTENCES), collators."""
from .collator import PretrainCollator, mask_static  # noqa: F401
from .instances import PAIRS, InstanceBuilder  # noqa: F401
from .masking import IGNORE, MASKINGS, Masker, MaskingConfig, describe_masking  # noqa: F401
from .pipeline import OBJECTIVES, DataConfig, build_instances, iter_instances, make_masker  # noqa: F401
from .segment import SentenceSegmenter  # noqa: F401
