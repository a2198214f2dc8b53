"""`bertfam mrc compare`: several MRC models and their ensemble on one dev file, F1/EM per question
type as a Markdown table, a JSON file and a PNG bar chart (the seed's ERNIE vs BERT vs RoBERTa table)."""
from __future__ import annotations

import json
import os
from typing import Optional, Sequence

from ..utils import atomic_write, atomic_write_text


def compare_models(model_dirs: Sequence[str], names: Sequence[str], data_path: str, out_dir: str,
                   ensemble: bool = True, mode: str = "auto", predictor_kw: Optional[dict] = None) -> str:
    from ..data.mrc import read_mrc
    from ..evaluation.dureader import evaluate, read_references
    from ..checkpoint import from_pretrained
    from .mrc import predict_examples, predictor_from_models

    kw = predictor_kw or {}
    examples, _ = read_mrc(data_path, mode="predict")
    refs = read_references(data_path)
    models = [from_pretrained(d) for d in model_dirs]
    runs = [(n, predictor_from_models([m], [d], **kw)) for n, m, d in zip(names, models, model_dirs)]
    if ensemble and len(models) > 1:
        runs.append(("ensemble", predictor_from_models(models, list(model_dirs), mode, **kw)))
    results = {}
    for name, pred in runs:
        preds, _, qps = predict_examples(pred, examples, progress=True)
        r = evaluate(refs, preds)
        r["questions_per_s"] = round(qps, 2)
        results[name] = r
    os.makedirs(out_dir, exist_ok=True)
    atomic_write_text(os.path.join(out_dir, "compare.json"), json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    table = markdown_table(results)
    atomic_write_text(os.path.join(out_dir, "compare.md"), table + "\n")
    bar_chart(results, os.path.join(out_dir, "compare.png"))
    return table


def markdown_table(results: dict) -> str:
    types = sorted({t for r in results.values() for t in r["per_type"]})
    cols = types + ["ALL"]
    head = "| model | " + " | ".join(f"{t} F1 / EM" for t in cols) + " | q/s |"
    lines = [head, "|" + "---|" * (len(cols) + 2)]
    for name, r in results.items():
        cells = [f"{r['per_type'][t]['F1']} / {r['per_type'][t]['EM']}" if t in r["per_type"] else "-"
                 for t in types]
        cells.append(f"{r['F1']} / {r['EM']}")
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {r['questions_per_s']} |")
    return "\n".join(lines)


def bar_chart(results: dict, path: str) -> None:
    """Grouped bars: for each question type (and ALL), F1 and EM of every model."""
    try:
        import matplotlib
    except ImportError:
        from ..errors import ConfigError

        raise ConfigError("compare draws its chart with matplotlib: pip install 'bertfam[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    types = sorted({t for r in results.values() for t in r["per_type"]}) + ["ALL"]
    names = list(results)
    fig, axes = plt.subplots(1, 2, figsize=(max(6, 1.6 * len(types) * max(1, len(names)) / 2), 4), sharey=True)
    width = 0.8 / max(1, len(names))
    x = np.arange(len(types))
    for ax, metric in zip(axes, ("F1", "EM")):
        for i, n in enumerate(names):
            r = results[n]
            rows = [r if t == "ALL" else r["per_type"].get(t, {metric: 0}) for t in types]
            vals = [float(row[metric]) for row in rows]
            ax.bar(x + i * width - 0.4 + width / 2, vals, width, label=n)
        ax.set_xticks(x)
        ax.set_xticklabels(types, rotation=30, ha="right")
        ax.set_title(metric)
        ax.set_ylim(0, 100)
    axes[0].set_ylabel("score (x100)")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=100))
    plt.close(fig)
