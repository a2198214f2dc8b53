"""VideoBERT's visual words: a k-means codebook over clip features (scikit-learn), saved as .npz.

Visual word k of a codebook of size K gets token id `text_vocab_size + k`: the visual vocabulary is
appended to the text vocabulary, so text and video share one embedding table and one MLM head.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..errors import DataError


@dataclass
class Codebook:
    centers: np.ndarray  # (K, D) float32

    @property
    def size(self) -> int:
        return int(self.centers.shape[0])

    @property
    def dim(self) -> int:
        return int(self.centers.shape[1])

    def quantize(self, x: np.ndarray) -> np.ndarray:
        """(N, D) -> (N,) index of the nearest centre (squared Euclidean distance)."""
        x = np.asarray(x, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise DataError(f"features of shape {x.shape} do not match the codebook dimension {self.dim}")
        d = (x * x).sum(1, keepdims=True) - 2.0 * x @ self.centers.T + (self.centers * self.centers).sum(1)[None]
        return d.argmin(axis=1).astype(np.int64)

    def save(self, path: str) -> None:
        from ..utils import atomic_path

        with atomic_path(path) as tmp:
            with open(tmp, "wb") as f:  # a file object: np.savez would append .npz to a bare tmp name
                np.savez(f, centers=self.centers)

    @classmethod
    def load(cls, path: str) -> "Codebook":
        if not os.path.isfile(path):
            raise DataError(f"{path}: codebook not found (fit one with `bertfam multimodal vocab`)")
        try:
            with np.load(path, allow_pickle=False) as z:
                c = np.asarray(z["centers"], dtype=np.float32)
        except Exception as e:
            why = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise DataError(f"{path}: not a codebook file ({why})") from None
        if c.ndim != 2 or c.shape[0] < 1 or not np.isfinite(c).all():
            raise DataError(f"{path}: codebook centres must be a finite (K, D) array, got shape {c.shape}")
        return cls(c)


def fit_codebook(features: Sequence[np.ndarray], size: int, seed: int = 0, max_samples: int = 100_000) -> Codebook:
    """k-means (k-means++ init) over all clip vectors (subsampled to max_samples)."""
    from sklearn.cluster import KMeans, MiniBatchKMeans

    x = np.concatenate([np.asarray(f, dtype=np.float32) for f in features], axis=0)  # (sum N, D)
    if len(x) < size:
        raise DataError(f"{len(x)} clip vectors cannot make {size} visual words; lower --size")
    rng = np.random.default_rng(seed)
    if len(x) > max_samples:
        x = x[rng.choice(len(x), max_samples, replace=False)]
    algo = KMeans if len(x) <= 20_000 else MiniBatchKMeans  # exact Lloyd when it is cheap
    km = algo(n_clusters=size, n_init=3, random_state=seed).fit(x)
    return Codebook(km.cluster_centers_.astype(np.float32))
