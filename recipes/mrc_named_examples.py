"""The named examples a release of the MRC system is held to (issue: README / web page / seed examples), each
answered by one or more model directories, with the fused P(answerable), the reader's own P and the top span;
PASS when the answer is what the example expects (a span that contains the expected text and is at most
`slack` characters longer; or declined where no answer is expected).

Usage: python recipes/mrc_named_examples.py MODEL [MODEL ...]   (exit 0; one table per model; exit 2 with one
line for a directory that holds no model)

The examples: the demo's five hand-written ones (bertfam.runners.demo.HAND_WRITTEN), the README's and the API
schema's /v1/mrc examples, the web page's prefilled passage with its placeholder question (read from
bertfam/serving/static/index.html, so a change there is seen here), the seed's 番石榴 question (DuReader-checklist
demo #7, with its title), and passages that do not answer (another university's founding year, another
country's capital). None of them is used to train or tune anything.
"""
from __future__ import annotations

import html
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from bertfam.runners.demo import HAND_WRITTEN, SEED_QUESTION, demo_data_path  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def web_page_passage() -> str:
    page = open(os.path.join(ROOT, "bertfam", "serving", "static", "index.html"), encoding="utf-8").read()
    m = re.search(r'<textarea id="passage"[^>]*>(.*?)</textarea>', page, re.S)
    if not m:
        raise SystemExit("bertfam/serving/static/index.html: no prefilled passage textarea found")
    return html.unescape(m.group(1)).strip()


def seed_example() -> dict:
    data = json.load(open(demo_data_path(), encoding="utf-8"))
    for art in data["data"]:
        for p in art["paragraphs"]:
            for q in p["qas"]:
                if q["question"] == SEED_QUESTION:
                    return {"question": q["question"], "passage": p["context"], "title": p.get("title"),
                            "expect": "一个番石榴所含的脂肪约0.9克重或84卡路里"}
    raise SystemExit(f"{demo_data_path()}: the seed question {SEED_QUESTION!r} is missing")


def examples() -> list[tuple[str, dict]]:
    out = [(f"hand-{i}", {"question": q, "passage": p, "expect": ref})
           for i, (q, p, ref) in enumerate(HAND_WRITTEN)]
    out += [
        ("readme", {"question": "中国的首都是哪里？", "passage": "北京是中华人民共和国的首都。", "expect": "北京"}),
        ("api-schema", {"question": "中国的首都是哪里？", "passage": "北京是中华人民共和国的首都，也是全国的政治、文化中心。",
                        "expect": "北京"}),
        ("web-page", {"question": "中国的首都是哪里？", "passage": web_page_passage(), "expect": "北京"}),
        ("france", {"question": "法国的首都是哪里？", "passage": "巴黎是法国的首都。", "expect": "巴黎"}),
        ("seed-guava", seed_example()),
        ("short-factoid", {"question": "北京大学创建于哪一年？",
                           "passage": "北京大学创建于1898年，初名京师大学堂，是中国近代第一所国立综合性大学。", "expect": "1898年"}),
        ("other-university", {"question": "北京大学创建于哪一年？",
                              "passage": "清华大学创建于1911年，位于北京西北郊，是中国著名的高等学府。", "expect": None}),
        ("other-capital", {"question": "日本的首都是哪里？", "passage": "巴黎是法国的首都。", "expect": None}),
    ]
    return out


def passes(answer, expect, slack: int = 4) -> bool:
    if expect is None:
        return answer is None
    return answer is not None and (expect in answer and len(answer) <= len(expect) + slack or answer in expect
                                   and len(answer) >= len(expect) - 1)


def run(model_dir: str) -> list[tuple[str, bool, object]]:
    """(name, passes, MRCPrediction with details) per example, answered by the model in model_dir."""
    from bertfam.checkpoint import from_pretrained
    from bertfam.tasks.mrc.predictor import MRCPredictor

    exs = examples()
    pred = MRCPredictor(from_pretrained(model_dir))
    res = pred.predict_batch([{k: v for k, v in e.items() if k != "expect"} for _, e in exs], details=True)
    return [(name, passes(r.answer, e["expect"]), r) for (name, e), r in zip(exs, res)]


def main(argv: list[str]) -> int:
    if not argv:
        print("Usage: python recipes/mrc_named_examples.py MODEL [MODEL ...]", file=sys.stderr)
        return 2
    from bertfam.errors import BertfamError

    for d in argv:
        try:
            rows = run(d)
        except BertfamError as e:
            print(f"mrc_named_examples: {e}", file=sys.stderr)
            return 2
        print(f"\n{d}")
        for name, ok, r in rows:
            top = r.nbest[0].text if r.nbest else ""
            p_reader = f"{r.p_reader:.2f}" if r.p_reader is not None else "-"
            print(f"  {'PASS' if ok else 'FAIL'}  {name:17s} P {r.p_answerable:.2f} (reader {p_reader})  "
                  f"answer {r.answer or '无答案'}  [top span {top[:24]}]")
        print(f"  {sum(ok for _, ok, _ in rows)}/{len(rows)} pass")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
