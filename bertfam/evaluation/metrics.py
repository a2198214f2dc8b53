"""Task metrics from scikit-learn, scipy and seqeval (no model imports here).

Every function takes plain Python/NumPy sequences and returns a dict of floats in [0, 100] for
percentages (accuracy, F1, MCC x 100) and correlations x 100, as the GLUE/CLUE leaderboards print them.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np


def accuracy(preds: Sequence, golds: Sequence) -> dict:
    p, g = np.asarray(preds), np.asarray(golds)
    return {"accuracy": 100.0 * float((p == g).mean()) if len(g) else 0.0}


def binary_f1(preds: Sequence, golds: Sequence, positive=1) -> dict:
    from sklearn.metrics import f1_score

    f1 = f1_score(list(golds), list(preds), pos_label=positive, average="binary", zero_division=0)
    return {"f1": 100.0 * float(f1), **accuracy(preds, golds)}


def macro_f1(preds: Sequence, golds: Sequence) -> dict:
    from sklearn.metrics import f1_score

    return {"macro_f1": 100.0 * float(f1_score(list(golds), list(preds), average="macro", zero_division=0)),
            **accuracy(preds, golds)}


def matthews(preds: Sequence, golds: Sequence) -> dict:
    from sklearn.metrics import matthews_corrcoef

    p, g = list(preds), list(golds)
    # sklearn warns and returns 0 when one side is constant; that is the right value for MCC
    mcc = 0.0 if len(set(p)) < 2 or len(set(g)) < 2 else float(matthews_corrcoef(g, p))
    return {"mcc": 100.0 * mcc, **accuracy(preds, golds)}


def correlations(preds: Sequence[float], golds: Sequence[float]) -> dict:
    from scipy.stats import pearsonr, spearmanr

    p, g = np.asarray(preds, dtype=float), np.asarray(golds, dtype=float)
    if len(p) < 2 or p.std() == 0 or g.std() == 0:  # undefined correlation: report 0, not NaN
        return {"pearson": 0.0, "spearman": 0.0, "corr": 0.0}
    pr, sr = float(pearsonr(p, g)[0]), float(spearmanr(p, g)[0])
    return {"pearson": 100.0 * pr, "spearman": 100.0 * sr, "corr": 50.0 * (pr + sr)}


def to_seqeval_tags(tags: Sequence[str]) -> list[str]:
    """BMES -> BIOES (seqeval knows I-, not M-)."""
    return [("I-" + t[2:]) if t.startswith("M-") else t for t in tags]


def entity_prf(pred_tags: Sequence[Sequence[str]], gold_tags: Sequence[Sequence[str]]) -> dict:
    """Entity-level micro precision/recall/F1 (conlleval rules, via seqeval), plus per-type F1."""
    from seqeval.metrics import classification_report, f1_score, precision_score, recall_score

    p = [to_seqeval_tags(s) for s in pred_tags]
    g = [to_seqeval_tags(s) for s in gold_tags]
    out = {"precision": 100.0 * float(precision_score(g, p, zero_division=0)),
           "recall": 100.0 * float(recall_score(g, p, zero_division=0)),
           "f1": 100.0 * float(f1_score(g, p, zero_division=0))}
    rep = classification_report(g, p, output_dict=True, zero_division=0)
    for k, v in rep.items():
        if k not in ("micro avg", "macro avg", "weighted avg") and isinstance(v, dict):
            out[f"f1_{k}"] = 100.0 * float(v["f1-score"])
    return out


METRICS = {"accuracy": accuracy, "f1": binary_f1, "macro_f1": macro_f1, "mcc": matthews, "corr": correlations,
           "entity_f1": entity_prf}
