"""MultimodalConfig: what the non-text part of a multimodal member looks like.

Saved as `multimodal.json` beside the encoder's `config.json`. The encoder itself is the one bertfam
encoder (`ModelConfig`); this file only describes the feature adapter (image regions, audio frames) or
the visual-word vocabulary (VideoBERT) that feeds it.
"""
from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from typing import Optional

from ..config import known_fields, read_json
from ..errors import ConfigError

MODALITIES = ("image", "video", "speech")
CONFIG_NAME = "multimodal.json"


@dataclass
class AudioConfig:
    """Log-mel filterbank front end (SpeechBERT-style input)."""

    sample_rate: int = 16000  # every WAV is resampled to this rate
    n_mels: int = 40
    win_ms: float = 25.0
    hop_ms: float = 10.0
    fmin: float = 20.0
    fmax: Optional[float] = None  # None: sample_rate / 2
    stack: int = 4  # consecutive frames concatenated into one input vector (shorter sequences)
    max_frames: int = 256  # after stacking; longer audio is cut (reported)

    @property
    def feature_dim(self) -> int:
        return self.n_mels * self.stack

    def validate(self) -> None:
        if self.sample_rate < 1000 or self.n_mels < 1 or self.stack < 1 or self.max_frames < 1:
            raise ConfigError("audio: sample_rate >= 1000, n_mels >= 1, stack >= 1 and max_frames >= 1 required")
        if not 0 < self.hop_ms <= self.win_ms:
            raise ConfigError("audio: need 0 < hop_ms <= win_ms")


@dataclass
class MultimodalConfig:
    """modality: image (VisualBERT regions), video (VideoBERT visual words) or speech (log-mel frames).

    image/speech: `feature_dim`-sized vectors are projected into the encoder (`FeatureAdapter`), with
    their own segment id `feature_type_id` and their own position table; `feature_positions` "zero"
    gives every feature position 0 (VisualBERT: regions are a set), "sequential" counts 0..N-1
    (frames are a sequence). `box_dim` > 0 adds a projection of region boxes (x1, y1, x2, y2[, area],
    normalised to [0, 1]). video: no adapter; `codebook_size` visual words are appended to the text
    vocabulary of `text_vocab_size` entries (visual word k has id text_vocab_size + k).
    """

    modality: str = "image"
    feature_dim: int = 0
    box_dim: int = 0
    feature_positions: str = "zero"
    feature_type_id: int = 1
    max_features: int = 512  # size of the feature position table
    text_vocab_size: Optional[int] = None  # video: size of the text part of the vocabulary
    codebook_size: int = 0  # video: number of visual words
    audio: Optional[AudioConfig] = None  # speech: front end used to turn WAV files into features
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.audio, dict):
            self.audio = AudioConfig(**known_fields(AudioConfig, self.audio, "audio"))
        self.validate()

    @property
    def uses_adapter(self) -> bool:
        return self.modality in ("image", "speech")

    def validate(self) -> None:
        if self.modality not in MODALITIES:
            raise ConfigError(f"modality {self.modality!r} not in {MODALITIES}")
        if self.feature_positions not in ("zero", "sequential"):
            raise ConfigError(f"feature_positions {self.feature_positions!r} not in ('zero', 'sequential')")
        if self.uses_adapter and self.feature_dim < 1:
            raise ConfigError(f"{self.modality}: feature_dim must be >= 1")
        if self.box_dim not in (0, 4, 5):
            raise ConfigError(f"box_dim must be 0, 4 or 5, got {self.box_dim}")
        if self.modality == "video" and (not self.text_vocab_size or self.codebook_size < 1):
            raise ConfigError("video: text_vocab_size and codebook_size >= 1 required")
        if self.audio is not None:
            self.audio.validate()

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def save(self, path: str) -> None:
        from ..utils import atomic_write_text

        atomic_write_text(path, json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str) -> "MultimodalConfig":
        d = read_json(path)
        try:
            return cls(**known_fields(cls, d, path))
        except TypeError as e:
            raise ConfigError(f"{path}: {e}") from None

    @classmethod
    def in_dir(cls, path: str) -> Optional["MultimodalConfig"]:
        p = os.path.join(path, CONFIG_NAME)
        return cls.load(p) if os.path.isfile(p) else None
