"""The official DuReader (LIC2021 checklist / LIC2020 robust) MRC metric, reproduced exactly.

Rules (as in the official evaluate.py):
- normalise: lower-case, then drop every character found in SP_CHARS. The official list also holds the
  two-character string "……"; the test is character by character, so it never matches and "…" survives.
- F1 tokens: each CJK ideograph (BERT's definition) is a token, "=" is a token, every maximal run of
  other characters (Latin letters, digits, spaces ...) is one token.
- F1 against one reference: longest common CONTIGUOUS token run; precision = run / prediction tokens,
  recall = run / reference tokens; the max over references. EM: normalised strings equal for some reference.
- An unanswerable question scores F1 = EM = 1 only when the prediction is "no answer" (any case).
- A question missing from the predictions scores 0 and is counted in SKIP and in TOTAL.
- Output: {"F1": "%.3f", "EM": "%.3f", "TOTAL": n, "SKIP": k} with scores x 100.
"""
from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Optional

from ..errors import DataError

NO_ANSWER = "no answer"
# the official sp_char list, in its order; "……" is two characters and is never matched (see above)
SP_CHARS = [":", "_", "`", "，", "。", "：", "？", "！", "(", ")", "“", "”", "；", "’", "《", "》", "……", "·", "、",
            ",", "「", "」", "（", "）", "－", "～", "『", "』", "|"]


def is_chinese_char(cp: int) -> bool:
    """BERT's definition of a CJK ideograph (CJK Unified Ideographs + extensions + compatibility)."""
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
            or 0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF
            or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


def normalize(text: str) -> str:
    text = text.lower()
    return "".join(ch for ch in text if ch not in SP_CHARS)


def tokenize(text: str) -> list[str]:
    """CJK ideographs and '=' are single tokens; each maximal run of anything else is one token."""
    out, buff = [], ""
    for ch in text:
        if is_chinese_char(ord(ch)) or ch == "=":
            if buff:
                out.append(buff)
                buff = ""
            out.append(ch)
        else:
            buff += ch
    if buff:
        out.append(buff)
    return out


def longest_common_run(a: list[str], b: list[str]) -> int:
    """Length of the longest common contiguous sub-sequence (substring) of two token lists."""
    best = 0
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0] * (len(b) + 1)
        for j, y in enumerate(b):
            if x == y:
                cur[j + 1] = prev[j] + 1
                if cur[j + 1] > best:
                    best = cur[j + 1]
        prev = cur
    return best


def f1_score(references: list[str], prediction: str) -> float:
    pred = tokenize(normalize(prediction))
    scores = []
    for ref in references:
        ans = tokenize(normalize(ref))
        run = longest_common_run(ans, pred)
        if run == 0:
            scores.append(0.0)
            continue
        p, r = run / len(pred), run / len(ans)
        scores.append(2 * p * r / (p + r))
    return max(scores) if scores else 0.0


def em_score(references: list[str], prediction: str) -> float:
    pred = normalize(prediction)
    return float(any(normalize(ref) == pred for ref in references))


@dataclass
class Reference:
    answers: list[str]
    impossible: bool
    qtype: str


def read_references(path: str, tag: Optional[str] = None) -> "OrderedDict[str, Reference]":
    """qid -> Reference from a SQuAD-layout file; `tag` keeps questions whose type starts with it."""
    from ..data.mrc import read_mrc

    examples, report = read_mrc(path, mode="reference")
    refs: "OrderedDict[str, Reference]" = OrderedDict()
    for ex in examples:
        if tag is not None and not ex.qtype.startswith(tag):
            continue
        refs[ex.qid] = Reference(ex.answer_texts, ex.is_impossible, ex.qtype)
    refs.problems = report.problems  # type: ignore[attr-defined]
    refs.report = report  # type: ignore[attr-defined]
    return refs


def read_predictions(path: str) -> tuple[dict[str, str], list[str]]:
    """{qid: answer}; entries whose answer is not a string are reported and treated as missing."""
    from ..data.mrc import load_json

    obj = load_json(path)
    if not isinstance(obj, dict):
        raise DataError(f"{path}: predictions must be a JSON object {{qid: answer}}")
    preds, problems = {}, []
    for k, v in obj.items():
        if isinstance(v, str):
            preds[k] = v
        else:
            problems.append(f"{path}: prediction for {k!r} is {type(v).__name__}, not a string: counted as missing")
    return preds, problems


def score_one(ref: Reference, prediction: str) -> tuple[float, float]:
    if ref.impossible:
        ok = float(prediction.lower() == NO_ANSWER)
        return ok, ok
    return f1_score(ref.answers, prediction), em_score(ref.answers, prediction)


def evaluate(refs: "OrderedDict[str, Reference]", preds: dict[str, Any]) -> dict:
    """The official numbers plus a per-type table (same rules within each type)."""
    total = _Acc()
    by_type: dict[str, _Acc] = {}
    for qid, ref in refs.items():
        acc_t = by_type.setdefault(ref.qtype or "-", _Acc())
        pred = preds.get(qid)
        if not isinstance(pred, str):
            f1 = em = 0.0
            skip = 1
        else:
            (f1, em), skip = score_one(ref, pred), 0
        for acc in (total, acc_t):
            acc.add(f1, em, skip)
    out = total.result()
    out["per_type"] = {t: a.result() for t, a in sorted(by_type.items())}
    return out


class _Acc:
    def __init__(self):
        self.f1 = self.em = 0.0
        self.total = self.skip = 0

    def add(self, f1: float, em: float, skip: int) -> None:
        self.f1 += f1
        self.em += em
        self.total += 1
        self.skip += skip

    def result(self) -> dict:
        n = self.total
        # the official script divides by TOTAL (0 questions -> 0, not an error)
        f1 = 100.0 * self.f1 / n if n else 0.0
        em = 100.0 * self.em / n if n else 0.0
        return {"F1": "%.3f" % f1, "EM": "%.3f" % em, "TOTAL": n, "SKIP": self.skip}


def official_line(result: dict) -> str:
    """The official script's one JSON line."""
    return json.dumps({k: result[k] for k in ("F1", "EM", "TOTAL", "SKIP")}, ensure_ascii=False)


def type_table(result: dict) -> str:
    rows = [("type", "F1", "EM", "TOTAL", "SKIP")]
    for t, r in result["per_type"].items():
        rows.append((t, r["F1"], r["EM"], str(r["TOTAL"]), str(r["SKIP"])))
    rows.append(("ALL", result["F1"], result["EM"], str(result["TOTAL"]), str(result["SKIP"])))
    w = [max(len(r[i]) for r in rows) for i in range(5)]
    return "\n".join("  ".join(c.ljust(w[i]) if i == 0 else c.rjust(w[i]) for i, c in enumerate(r)) for r in rows)


def evaluate_files(data_path: str, pred_path: str, tag: Optional[str] = None) -> dict:
    refs = read_references(data_path, tag)
    preds, problems = read_predictions(pred_path)
    result = evaluate(refs, preds)
    result["problems"] = list(refs.problems) + problems  # type: ignore[attr-defined]
    return result
