"""Parameter count and CPU inference speed of TinyBERT-4L-312 vs BERT-base, same batch, one run.

The TinyBERT paper (Jiao et al., 2020, Table 1) reports 14.5M vs 109M parameters (7.5x smaller) and
9.4x faster inference. Weights are random (speed does not depend on them); both models run the same
padded batch, timed alternately so that load changes on a shared machine hit both alike.

    python benchmarks/tinybert_speed.py --batch-size 8 --seq-len 128 --reps 5 --threads 1
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from bertfam import build_model, optimize_for_inference, preset


def count(model) -> int:
    return model.num_parameters()["total"]


@torch.inference_mode()
def time_once(model, batch) -> float:
    t0 = time.perf_counter()
    model(**batch)
    return time.perf_counter() - t0


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--vocab-size", type=int, default=30522, help="30522: the English uncased vocab of the paper")
    p.add_argument("--out", help="write the result as JSON here")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    models = {name: optimize_for_inference(build_model(preset(name, vocab_size=a.vocab_size), seed=0).eval())
              for name in ("bert-base", "tinybert-4l-312")}
    g = torch.Generator().manual_seed(0)
    batch = {"input_ids": torch.randint(1000, a.vocab_size, (a.batch_size, a.seq_len), generator=g),
             "attention_mask": torch.ones(a.batch_size, a.seq_len, dtype=torch.long)}
    for m in models.values():  # warm-up (allocator, kernels)
        time_once(m, batch)
    times = {n: [] for n in models}
    for _ in range(a.reps):
        for n, m in models.items():
            times[n].append(time_once(m, batch))
    base, tiny = models["bert-base"], models["tinybert-4l-312"]
    med = {n: statistics.median(t) for n, t in times.items()}
    res = {"batch": [a.batch_size, a.seq_len], "threads": a.threads, "reps": a.reps,
           "params": {"bert-base": count(base), "tinybert-4l-312": count(tiny)},
           "params_ratio": count(base) / count(tiny),
           "median_s": med, "all_s": times,
           "speedup": med["bert-base"] / med["tinybert-4l-312"],
           "paper": {"params_ratio": 7.5, "speedup": 9.4}}
    print(json.dumps(res, indent=2))
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            json.dump(res, f, indent=2)
    return res


if __name__ == "__main__":
    main()
