"""Curves of a training run: the trainer's metrics.jsonl read back (`read_metrics`) and drawn as PNG panels
(loss, MLM accuracy, NSP/SOP accuracy, lr) by `plot_run` (`bertfam plot RUN_DIR`).

matplotlib is an optional dependency (`pip install bertfam[plot]`).
"""
from __future__ import annotations

import json
import os
from typing import Optional, Sequence

from ..errors import ConfigError, DataError

PANELS = (  # (title, [(key, label)])
    ("loss", [("loss", "train loss"), ("eval_mlm_loss", "eval MLM loss")]),
    ("MLM accuracy", [("mlm_acc", "train (masked tokens)"), ("eval_mlm_acc", "eval")]),
    ("NSP/SOP accuracy", [("pair_acc", "train"), ("eval_pair_acc", "eval")]),
    ("learning rate", [("lr", "lr")]),
)


def read_metrics(run_dir: str) -> list[dict]:
    path = os.path.join(run_dir, "metrics.jsonl") if os.path.isdir(run_dir) else run_dir
    if not os.path.isfile(path):
        raise DataError(f"{path}: no metrics.jsonl (is this a training run directory?)")
    recs = []
    with open(path, encoding="utf-8") as f:
        for no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                recs.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut by a kill mid-write; the rest of the file is still usable
    if not recs:
        raise DataError(f"{path}: no metric records")
    return recs


def _series(recs: list[dict], key: str) -> tuple[list, list]:
    last: dict = {}
    for r in recs:  # a resumed run re-logs steps: the latest value per step wins
        if key in r and r.get("step") is not None:
            last[r["step"]] = r[key]
    steps = sorted(last)
    return steps, [last[s] for s in steps]


def plot_run(run_dir: str, out: Optional[str] = None, panels: Optional[Sequence[str]] = None) -> str:
    """Write the curves to `out` (default RUN_DIR/curves.png); returns the path."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError("plotting needs matplotlib: pip install 'bertfam[plot]'") from None
    recs = read_metrics(run_dir)
    chosen = [p for p in PANELS if (panels is None or p[0] in panels) and any(_series(recs, k)[0] for k, _ in p[1])]
    if not chosen:
        raise DataError(f"{run_dir}: none of the plotted metrics was logged")
    fig, axes = plt.subplots(1, len(chosen), figsize=(4.2 * len(chosen), 3.4), squeeze=False)
    for ax, (title, keys) in zip(axes[0], chosen):
        for key, label in keys:
            x, y = _series(recs, key)
            if x:
                ax.plot(x, y, marker="o" if key.startswith("eval_") else None, ms=3, label=label)
        ax.set_title(title)
        ax.set_xlabel("optimizer step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    out = out or os.path.join(run_dir if os.path.isdir(run_dir) else os.path.dirname(run_dir), "curves.png")
    from ..utils import atomic_write

    atomic_write(out, lambda tmp: fig.savefig(tmp, dpi=110, format="png"))
    plt.close(fig)
    return out
