"""Spoken input: WAV -> mono float -> resampled -> log-mel filterbank frames -> stacked feature vectors.

numpy + scipy only (torchaudio cannot be installed beside bertfam's torch pin; scipy is already a
dependency): `scipy.io.wavfile` reads PCM/float WAV, `scipy.signal.resample_poly` resamples, and the
mel filterbank is the Slaney-style one librosa uses by default (`librosa.filters.mel(htk=False,
norm="slaney")`; checked against librosa 0.11 in docs/multimodal.md).
"""
from __future__ import annotations

import math
import warnings
from functools import lru_cache

import numpy as np

from .config import AudioConfig

LOG_FLOOR = 1e-6


def read_wav(path: str) -> tuple[np.ndarray, int]:
    """(mono float32 samples in [-1, 1], sample rate); ValueError for unreadable, empty or non-finite audio."""
    from scipy.io import wavfile

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", wavfile.WavFileWarning)  # e.g. unknown LIST chunks (espeak-ng)
            sr, y = wavfile.read(path)
    except FileNotFoundError:
        raise ValueError(f"audio file {path} not found") from None
    except Exception as e:  # scipy raises ValueError / struct.error on bad headers
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ValueError(f"cannot read {path} as WAV ({why})") from None
    y = np.asarray(y)
    if y.dtype.kind == "i":
        y = y.astype(np.float32) / float(np.iinfo(y.dtype).max + 1)
    elif y.dtype.kind == "u":  # 8-bit WAV is unsigned with a 128 offset
        y = (y.astype(np.float32) - 128.0) / 128.0
    else:
        y = y.astype(np.float32)
    if y.ndim == 2:
        y = y.mean(axis=1)  # mix channels down to mono
    if y.size == 0:
        raise ValueError(f"{path}: empty audio (0 samples)")
    if not np.isfinite(y).all():
        raise ValueError(f"{path}: audio holds NaN/Inf samples")
    return y, int(sr)


def resample(y: np.ndarray, sr: int, target: int) -> np.ndarray:
    if sr == target:
        return y
    from scipy.signal import resample_poly

    g = math.gcd(sr, target)
    return resample_poly(y, target // g, sr // g).astype(np.float32)  # polyphase, anti-aliased


def hz_to_mel(f):
    """Slaney's mel scale: linear below 1 kHz, logarithmic above (librosa's default)."""
    f = np.asarray(f, dtype=np.float64)
    lin = f / (200.0 / 3)
    return np.where(f >= 1000.0, 15.0 + np.log(np.maximum(f, 1e-10) / 1000.0) / (np.log(6.4) / 27.0), lin)


def mel_to_hz(m):
    m = np.asarray(m, dtype=np.float64)
    return np.where(m >= 15.0, 1000.0 * np.exp((np.log(6.4) / 27.0) * (m - 15.0)), m * (200.0 / 3))


@lru_cache(maxsize=8)
def mel_filterbank(sr: int, n_fft: int, n_mels: int, fmin: float, fmax: float) -> np.ndarray:
    """(n_mels, n_fft // 2 + 1) triangular filters, area-normalised (Slaney)."""
    freqs = np.linspace(0, sr / 2, n_fft // 2 + 1)
    edges = mel_to_hz(np.linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2))
    lower = (freqs[None, :] - edges[:-2, None]) / np.diff(edges)[:-1, None]
    upper = (edges[2:, None] - freqs[None, :]) / np.diff(edges)[1:, None]
    fb = np.maximum(0.0, np.minimum(lower, upper))
    return (fb * (2.0 / (edges[2:] - edges[:-2]))[:, None]).astype(np.float32)


def log_mel(y: np.ndarray, cfg: AudioConfig) -> np.ndarray:
    """(frames, n_mels) natural-log mel power spectrogram; frames centred every hop, Hann window."""
    sr = cfg.sample_rate
    win, hop = int(round(sr * cfg.win_ms / 1000)), int(round(sr * cfg.hop_ms / 1000))
    n_fft = 1 << (win - 1).bit_length()  # next power of two
    y = np.pad(y, (n_fft // 2, n_fft // 2), mode="reflect" if len(y) > n_fft // 2 else "constant")
    n = 1 + max(0, (len(y) - n_fft) // hop)
    idx = np.arange(n_fft)[None, :] + hop * np.arange(n)[:, None]  # (frames, n_fft)
    window = np.zeros(n_fft, dtype=np.float32)
    off = (n_fft - win) // 2
    window[off:off + win] = np.hanning(win + 1)[:-1]  # periodic Hann, centred in the FFT frame
    power = np.abs(np.fft.rfft(y[idx] * window, axis=1)) ** 2  # (frames, n_fft/2 + 1)
    fb = mel_filterbank(sr, n_fft, cfg.n_mels, float(cfg.fmin), float(cfg.fmax or sr / 2))
    return np.log(power @ fb.T + LOG_FLOOR).astype(np.float32)


def stack_frames(m: np.ndarray, k: int) -> np.ndarray:
    """(T, F) -> (ceil(T / k), F * k): k consecutive frames side by side (last group padded by repetition)."""
    if k == 1:
        return m
    T = m.shape[0]
    pad = (-T) % k
    if pad:
        m = np.concatenate([m, np.repeat(m[-1:], pad, axis=0)], axis=0)
    return m.reshape(-1, k * m.shape[1])


def normalize_channels(m: np.ndarray) -> np.ndarray:
    """Per-utterance mean/variance normalisation of each mel channel (removes loudness and channel)."""
    return (m - m.mean(axis=0, keepdims=True)) / (m.std(axis=0, keepdims=True) + 1e-5)


def wav_features(path: str, cfg: AudioConfig) -> tuple[np.ndarray, list[str]]:
    """(features (N, n_mels * stack), notes about what was changed) of one WAV file."""
    y, sr = read_wav(path)
    notes = []
    if sr != cfg.sample_rate:
        y = resample(y, sr, cfg.sample_rate)
        notes.append(f"resampled {sr} Hz -> {cfg.sample_rate} Hz")
    feats = stack_frames(normalize_channels(log_mel(y, cfg)), cfg.stack)
    if feats.shape[0] > cfg.max_frames:
        notes.append(f"cut {feats.shape[0]} -> {cfg.max_frames} feature vectors")
        feats = feats[: cfg.max_frames]
    return feats, notes
