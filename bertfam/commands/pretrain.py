"""Pre-training commands: pretrain, pretrain-data, plot (the jobs: runners.pretrain; --modality: runners.multimodal)."""
from __future__ import annotations

import argparse
import os

from .common import (add_threads_arg, float_range, non_negative_float, non_negative_int, open_fraction,
                     positive_float, positive_int, probability, seed, set_threads)
from .flags import Flags, read_run_file

S = argparse.SUPPRESS  # options left out do not appear: PretrainConfig (or the resumed run's own) supplies them


def _data_args(p, masking_required: bool = False) -> None:
    p.add_argument("--objective", choices=["bert", "roberta", "albert", "ernie"], default=S,
                   help="bert: token+NSP; roberta: token, FULL-SENTENCES; albert: token+SOP; ernie: ERNIE+NSP")
    p.add_argument("--pair", choices=["nsp", "sop", "none"], default=S, help="override the pair objective")
    p.add_argument("--masking", choices=["token", "wwm", "ernie", "span"], default=S, help="override the masking")
    p.add_argument("--corpus", nargs="+", default=S, metavar="FILE", help="text (BERT layout) / JSONL files or dirs")
    p.add_argument("--vocab", default=S, help="vocab.txt or tokenizer directory")
    p.add_argument("--max-seq-len", type=positive_int, default=S)
    p.add_argument("--short-seq-prob", type=probability, default=S)
    p.add_argument("--mask-rate", type=open_fraction, default=S)
    p.add_argument("--ernie-mix", type=non_negative_float, nargs=3, default=S,
                   metavar=("BASIC", "PHRASE", "ENTITY"), help="probabilities of ERNIE's masking levels per sequence")
    p.add_argument("--span-p", type=float_range(0, 1, lo_open=True), default=S,
                   help="geometric parameter of span lengths (masking span)")
    p.add_argument("--eval-every-doc", type=non_negative_int, default=S,
                   help="hold out every N-th document for evaluation (0: none)")
    p.add_argument("--eval-size", type=non_negative_int, default=S, help="at most this many evaluation instances")
    p.add_argument("--chunk-docs", type=positive_int, default=S, help="documents per streamed chunk")
    p.add_argument("--max-line-chars", type=positive_int, default=S, help="longer lines are truncated with a warning")
    p.add_argument("--text-field", default=S, help="JSONL field holding the text")
    p.add_argument("--seed", type=seed, default=S)


def _config_defaults() -> dict:
    """PretrainConfig's defaults by option name: what --help shows for an option left out."""
    import dataclasses

    from ..runners.pretrain import PretrainConfig

    return PretrainConfig.flatten(dataclasses.asdict(PretrainConfig()))


def register(sub) -> None:
    parser = sub.add_parser("pretrain", help="pre-train a BERT-family model (BERT/RoBERTa/ALBERT/ERNIE objectives)")
    parser.config_defaults = _config_defaults
    p = SavedRunFlags(parser)
    _data_args(p)
    p.add_argument("--model-config", default=S, help="preset name or config JSON")
    p.add_argument("--data", default=S, help="instance cache from `bertfam pretrain-data` (instead of --corpus)")
    p.add_argument("--out", default=S, help="run directory")
    p.add_argument("--init", default=S, help="continue pre-training from this checkpoint")
    p.add_argument("--resume", default=S, help="resume an interrupted run (its directory or a checkpoint); a run "
                   "that already finished is left unchanged (exit code 0, one line saying so)")
    p.add_argument("--overwrite-output-dir", action="store_true", default=S,
                   help="replace the run in a non-empty --out (without it, or --resume, such an --out is refused)")
    # 0 is meaningful for some: no warm-up, no clipping, checkpoint / evaluate at the end only, keep all
    for name, typ in (("epochs", positive_float), ("max-steps", positive_int), ("batch-size", positive_int),
                      ("lr", positive_float), ("weight-decay", non_negative_float), ("warmup-ratio", probability),
                      ("warmup-steps", non_negative_int), ("grad-accum", positive_int),
                      ("max-grad-norm", non_negative_float), ("save-every", non_negative_int),
                      ("keep-last", non_negative_int), ("log-every", positive_int), ("eval-every", non_negative_int)):
        p.add_argument(f"--{name}", type=typ, default=S)
    p.add_argument("--precision", choices=["auto", "fp32", "bf16", "fp16"], default=S)
    p.add_argument("--no-optimizer-state", dest="save_optimizer_state", action="store_false", default=S,
                   help="checkpoints hold the weights only (a third of the size); they cannot be resumed")
    p.add_argument("--final-only", dest="checkpoints", action="store_false", default=S,
                   help="write no OUT/checkpoints, only the final model")
    p.add_argument("--no-progress", dest="progress", action="store_false", default=S)
    add_threads_arg(p)
    p.add_argument("--modality", choices=["image", "video", "speech"], default=S,
                   help="multimodal pre-training (= bertfam multimodal pretrain; needs --features DIR)")
    p.add_argument("--features", default=S, metavar="DIR", help="with --modality: manifest.jsonl + feature files")
    p.add_argument("--codebook", default=S, help="with --modality video: visual-word codebook (.npz)")
    p.command(_pretrain)

    parser = sub.add_parser("pretrain-data", help="cache pre-training instances (static masking, dupe_factor)")
    parser.config_defaults = _config_defaults
    p = Flags(parser)
    _data_args(p)
    p.add_argument("--out", required=True, help="cache directory")
    p.add_argument("--dupe-factor", type=non_negative_int, default=5,
                   help="masked copies per instance (0: unmasked, for dynamic masking at training time)")
    p.command(_pretrain_data)

    p = sub.add_parser("plot", help="PNG curves (loss, MLM/NSP/SOP accuracy, lr) of a training run")
    p.add_argument("run_dir")
    p.add_argument("--out", default=None, help="PNG path (default RUN_DIR/curves.png)")
    p.set_defaults(func=_plot)


_NOT_CONFIG = {"func", "command", "verbose", "config", "threads", "dupe_factor"}
_RETIRED = ("stop_after_step",)  # testing fields that older run directories record


class SavedRunFlags(Flags):
    """--config also reads a saved OUT/pretrain_config.json: its "train" section (the TrainConfig) gives the
    options of the same names (out_dir: --out). A trainer field that `bertfam pretrain` has no option for is
    passed over when it holds the command's own value, and named as unknown otherwise. The run it records is
    not resumed (its `resume` is left out): continuing a run is --resume RUN."""

    def load(self, path: str) -> dict:
        d = read_run_file(path)
        if not isinstance(d.get("train"), dict):
            return d
        from ..runners.pretrain import PretrainConfig

        default = PretrainConfig.default_train()
        flat = PretrainConfig.flatten(d)
        flat.pop("resume", None)
        for k, v in d["train"].items():
            name = "out" if k == "out_dir" else k
            if name not in self.keys and v == getattr(default, k, object()):
                flat.pop(name, None)
        return flat


def _saved_run_config(run_dir: str) -> dict:
    """The saved run config of a run directory or of one of its checkpoints, flat ({} when there is none)."""
    from ..config import read_json
    from ..runners.pretrain import RUN_CONFIG_FILE, PretrainConfig

    for cand in (os.path.join(run_dir, RUN_CONFIG_FILE), os.path.join(run_dir, "..", "..", RUN_CONFIG_FILE)):
        if os.path.isfile(cand):
            d = PretrainConfig.flatten(read_json(cand))  # older files are flat already
            for k in _RETIRED:
                d.pop(k, None)
            return d
    return {}


def _merged(args) -> dict:
    """The resumed run's own config < the options (the command line's over the --config file's)."""
    resume = getattr(args, "resume", None)
    d = _saved_run_config(resume) if resume else {}
    d.update({k: v for k, v in vars(args).items() if k not in _NOT_CONFIG})
    return {k.replace("-", "_"): v for k, v in d.items()}


def _pretrain(args) -> int:
    if getattr(args, "modality", None):  # multimodal members: bertfam/multimodal (docs/multimodal.md)
        from .multimodal import pretrain_from_generic_args

        return pretrain_from_generic_args(args)
    from ..runners.pretrain import PretrainConfig, run_pretraining

    set_threads(args)
    d = _merged(args)
    if d.get("resume") and not d.get("out"):
        d["out"] = d["resume"]
    pc = PretrainConfig.from_dict(d, source=getattr(args, "config", "run config"))
    s = run_pretraining(pc)
    if s.get("already_complete"):  # not an error: re-running a finished pipeline step is a no-op
        print(f"{pc.resume}: already complete (step {s['steps']} of {s['total_steps']}); nothing changed")
        return 0
    print(f"pre-trained {s['steps']} steps ({s['train_instances']} instances, {s['tokens_per_s']:.0f} tokens/s); "
          f"model in {pc.out}")
    if s.get("written"):
        print(s["written"])
    return 0


def _pretrain_data(args) -> int:
    from ..runners.pretrain import PretrainConfig, run_pretrain_data

    pc = PretrainConfig.from_dict(_merged(args), source=getattr(args, "config", "run config"))
    meta = run_pretrain_data(pc, args.dupe_factor)
    print(f"wrote {pc.out}: {meta['counts']['train']} training / {meta['counts']['eval']} evaluation instances "
          f"({meta['corpus_stats']})")
    return 0


def _plot(args) -> int:
    from ..runners.pretrain import run_plot

    print(f"wrote {run_plot(args.run_dir, args.out)}")
    return 0
