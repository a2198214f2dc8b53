"""Multimodal members of the family on the one bertfam encoder: VisualBERT (image regions), VideoBERT
(visual words) and SpeechBERT-style spoken input (log-mel frames). See docs/multimodal.md."""
from .config import MODALITIES, AudioConfig, MultimodalConfig  # noqa: F401
from .loading import init_from_text, load_multimodal  # noqa: F401
from .model import FeatureAdapter, MultimodalModel, build_multimodal  # noqa: F401
