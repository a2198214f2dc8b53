"""Calibration of static int8 (int8_static.py): the input range of every encoder projection, observed in float
forwards over real inputs, as a uint8 scale and zero point per projection.

`calibrate(model, batches, observer)` hooks each encoder layer's attn.qkv, attn.out, ffn_in and ffn_out
(forward pre-hooks on the float model's own modules), runs the batches through the model, and keeps what the
projections' inputs held on real tokens only: in the padded layout the (B, T, .) inputs are cut to the rows
the batch's attention mask marks (the packed layout holds real tokens only), so padding never widens a range.

Observers (`OBSERVERS`), each giving the range [lo, hi] a scale covers (widened to hold 0):
- "minmax": the smallest and largest value seen;
- "percentile": the 0.01 % and 99.99 % quantiles of a seeded sample of the values (clips rare outliers);
- "mse": the range, among minmax shrunk by factors 1.0 .. 0.3, whose uint8 rounding and clipping of the
  sample has the least mean squared error.
Which keeps the hidden states closest to float: minmax, the default. Max / mean |int8 - float| of the last
hidden state over real tokens of held-out inputs:
- models/mrc-zh-e5small-l6 (the 6-layer MRC reader shipped before, in git history; real weights; calibrated
  on the 12 questions of tests/fixtures/mrc
  cmrc2018_trial_cut.json + robust_demo_dev_cut.json, 2626 tokens; held out: the 8 of checklist_demo_cut.json,
  1526 tokens, mean |x| 0.40): minmax 0.44 / 0.042 (relative Frobenius error 11.2 %), mse 0.66 / 0.050
  (13.5 %), percentile 3.7 / 0.110 (30.6 %); dynamic int8 of the same model 0.49 / 0.047 (12.6 %);
- the random-weight model of tests/test_int8_static.py (hidden 256): minmax 1.87e-2, mse 1.85e-2,
  percentile 3.73e-2; dynamic 1.89e-2.
Clipping costs a real model more than the finer resolution inside the range gains: its LayerNorm outputs
carry a few large dimensions on every token and GELU's output a long right tail, and a clipped outlier is a
large error in one unit that every later layer carries on. The others stay for models where a handful of
extreme tokens stretch a range.
"""
from __future__ import annotations

from typing import Iterable, Optional

import torch
from torch import nn

from ..errors import ConfigError
from .int8_static import qparams_from_range
from .linear import projections

OBSERVERS = ("minmax", "percentile", "mse")
DEFAULT_OBSERVER = "minmax"  # closest to float where measured (above)
SAMPLE = 1 << 18  # values per projection kept for percentile / mse (a seeded draw from every batch)
PERCENTILE = 1e-4  # the share of values clipped at each end by "percentile"
MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids", "position_ids", "task_type_ids")


class RangeObserver:
    """The range of one projection's inputs over real tokens: exact min / max, and a sample of the values."""

    def __init__(self, sample: int, generator: torch.Generator) -> None:
        self.lo, self.hi, self.seen = float("inf"), float("-inf"), 0
        self.sample, self.generator, self.values = sample, generator, []

    def add(self, x: torch.Tensor) -> None:
        """x (R, K): the real tokens' rows."""
        if x.numel() == 0:
            return
        self.lo, self.hi = min(self.lo, float(x.min())), max(self.hi, float(x.max()))
        self.seen += 1
        if self.sample:
            v = x.reshape(-1)
            if v.numel() > self.sample:
                v = v[torch.randint(v.numel(), (self.sample,), generator=self.generator)]
            self.values.append(v.float().clone())

    def range(self, observer: str) -> tuple[float, float]:
        """[lo, hi] by `observer` (OBSERVERS)."""
        if observer == "minmax" or not self.values:
            return self.lo, self.hi
        v = torch.cat(self.values)
        if v.numel() > self.sample:  # sampled from every batch; keep a uniform draw of SAMPLE of them
            v = v[torch.randperm(v.numel(), generator=self.generator)[:self.sample]]
        if observer == "percentile":
            q = torch.quantile(v, torch.tensor([PERCENTILE, 1 - PERCENTILE]))
            return float(q[0]), float(q[1])
        return min(((self.lo * f, self.hi * f) for f in torch.linspace(1.0, 0.3, 36).tolist()),
                   key=lambda r: _rounding_mse(v, *r))


def _rounding_mse(v: torch.Tensor, lo: float, hi: float) -> float:
    """Mean squared error of v (n,) through uint8 codes covering [lo, hi] (what int8_static.quantize_u8 does)."""
    scale, zp = qparams_from_range(lo, hi)
    q = torch.clamp(torch.round(v / scale) + zp, 0, 255)
    return float(((q - zp) * scale - v).pow(2).mean())


def calibrate(model: nn.Module, batches: Iterable[dict], observer: str = DEFAULT_OBSERVER, seed: int = 0) -> dict:
    """{name in `model` of each encoder projection: (scale, zero point)} of its input, observed over float
    forwards of `batches` (dicts of model inputs: input_ids, attention_mask ...; padded, any layout). The
    model must be float in those projections and run them as modules (not optimize_for_inference's
    buffer-reusing layers, which call their kernels directly): a projection that saw nothing is an error."""
    if observer not in OBSERVERS:
        raise ConfigError(f"calibration observer {observer!r} not in {', '.join(OBSERVERS)}")
    names = {id(m): n for n, m in model.named_modules()}
    lins = [lin for _, _, lin in projections(model)]
    if not lins or any(not isinstance(lin, nn.Linear) for lin in lins):
        raise ConfigError("calibrate: the model's encoder projections must be float nn.Linear modules "
                          "(calibrate the float model, before any int8 swap)")
    g = torch.Generator().manual_seed(seed)
    obs = {names[id(lin)]: RangeObserver(0 if observer == "minmax" else SAMPLE, g) for lin in lins}
    _run_observed(model, batches, {id(lin): obs[names[id(lin)]] for lin in lins}, lins)
    blind = [n for n, o in obs.items() if not o.seen]
    if blind:
        raise ConfigError(f"calibrate: {blind[0]} saw no input ({len(blind)} projections did not): no batch, "
                          "or a model whose layers bypass their modules (calibrate before optimize_for_inference)")
    return {n: qparams_from_range(*o.range(observer)) for n, o in obs.items()}


def _run_observed(model: nn.Module, batches: Iterable[dict], obs: dict, lins: list) -> None:
    """The float forwards with a pre-hook on each projection feeding its observer the real tokens' rows."""
    real: list[Optional[torch.Tensor]] = [None]  # the current batch's (B, T) real-token mask

    def hook(module, args):
        obs[id(module)].add(real_rows(args[0], real[0]))

    handles = [lin.register_forward_pre_hook(hook) for lin in lins]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for b in batches:
                real[0] = real_token_mask(b)
                model(**{k: v for k, v in b.items() if k in MODEL_INPUTS})
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)


def real_token_mask(batch: dict) -> Optional[torch.Tensor]:
    """(B, T) bool of the batch's real tokens, None when all are real. A (B, T, T) visibility matrix
    (K-BERT) marks a real token by seeing itself (its diagonal)."""
    m = batch.get("attention_mask")
    if m is None:
        return None
    return (m.diagonal(dim1=1, dim2=2) if m.dim() == 3 else m).bool()


def real_rows(x: torch.Tensor, real: Optional[torch.Tensor]) -> torch.Tensor:
    """A projection's input as rows (R, K) of real tokens: (B, T, K) padded rows cut by `real` (B, T); a
    packed (N, K) input is real tokens already."""
    if x.dim() == 3 and real is not None and tuple(real.shape) == tuple(x.shape[:2]):
        return x[real]
    return x.reshape(-1, x.shape[-1])
