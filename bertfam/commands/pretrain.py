"""Pre-training commands: pretrain, pretrain-data, plot (the jobs: runners.pretrain; --modality: runners.multimodal)."""
from __future__ import annotations

from ..config import read_run_file
from .common import (add_threads_arg, float_range, non_negative_float, non_negative_int, open_fraction,
                     positive_float, positive_int, probability, seed, set_threads)
from .flags import Flag, Flags

# the corpus, tokenizer and objective: PretrainConfig's fields that `pretrain` and `pretrain-data` share
DATA_FLAGS = {
    "objective": Flag(help="bert: token+NSP; roberta: token, FULL-SENTENCES; albert: token+SOP; ernie: ERNIE+NSP",
                      choices=("bert", "roberta", "albert", "ernie")),
    "pair": Flag(help="override the pair objective", choices=("nsp", "sop", "none")),
    "masking": Flag(help="override the masking", choices=("token", "wwm", "ernie", "span")),
    "corpus": Flag(help="text (BERT layout) / JSONL files or dirs", metavar="FILE"),
    "vocab": Flag(help="vocab.txt or tokenizer directory"),
    "max_seq_len": Flag(positive_int),
    "short_seq_prob": Flag(probability),
    "mask_rate": Flag(open_fraction),
    "ernie_mix": Flag(non_negative_float, "probabilities of ERNIE's masking levels per sequence",
                      metavar=("BASIC", "PHRASE", "ENTITY"), nargs=3),
    "span_p": Flag(float_range(0, 1, lo_open=True), "geometric parameter of span lengths (masking span)"),
    "eval_every_doc": Flag(non_negative_int, "hold out every N-th document for evaluation (0: none)"),
    "eval_size": Flag(non_negative_int, "at most this many evaluation instances"),
    "chunk_docs": Flag(positive_int, "documents per streamed chunk"),
    "max_line_chars": Flag(positive_int, "longer lines are truncated with a warning"),
    "text_field": Flag(help="JSONL field holding the text"),
    "train.seed": Flag(seed),
}

# `pretrain`'s own fields and its trainer's (0 is meaningful for some: no warm-up, no clipping, checkpoint /
# evaluate at the end only, keep all)
RUN_FLAGS = {
    "model_config": Flag(help="preset name or config JSON"),
    "data": Flag(help="instance cache from `bertfam pretrain-data` (instead of --corpus)"),
    "train.out_dir": Flag(help="run directory", name="--out"),
    "init": Flag(help="continue pre-training from this checkpoint"),
    "resume": Flag(help="resume an interrupted run (its directory or a checkpoint); a run that already finished "
                        "is left unchanged (exit code 0, one line saying so)"),
    "overwrite_output_dir": Flag(help="replace the run in a non-empty --out (without it, or --resume, such an "
                                      "--out is refused)"),
    "train.epochs": Flag(positive_float),
    "train.max_steps": Flag(positive_int),
    "train.batch_size": Flag(positive_int),
    "train.lr": Flag(positive_float),
    "train.weight_decay": Flag(non_negative_float),
    "train.warmup_ratio": Flag(probability),
    "train.warmup_steps": Flag(non_negative_int),
    "train.grad_accum": Flag(positive_int),
    "train.max_grad_norm": Flag(non_negative_float),
    "train.save_every": Flag(non_negative_int),
    "train.keep_last": Flag(non_negative_int),
    "train.log_every": Flag(positive_int),
    "train.eval_every": Flag(non_negative_int),
    "train.precision": Flag(choices=("auto", "fp32", "bf16", "fp16")),
    "train.save_optimizer_state": Flag(help="checkpoints hold the weights only (a third of the size); they cannot "
                                            "be resumed", name="--no-optimizer-state"),
    "train.checkpoints": Flag(help="write no OUT/checkpoints, only the final model", name="--final-only"),
    "train.progress": Flag(name="--no-progress"),
}


def register(sub) -> None:
    from ..runners.pretrain import PretrainConfig

    p = PretrainFlags(sub.add_parser("pretrain", help="pre-train a BERT-family model (BERT/RoBERTa/ALBERT/ERNIE "
                                                      "objectives)"), PretrainConfig)
    p.fields(DATA_FLAGS)
    p.fields(RUN_FLAGS)
    add_threads_arg(p)
    p.add_argument("--modality", choices=["image", "video", "speech"],
                   help="multimodal pre-training (= bertfam multimodal pretrain; needs --features DIR)")
    p.add_argument("--features", metavar="DIR", help="with --modality: manifest.jsonl + feature files")
    p.add_argument("--codebook", help="with --modality video: visual-word codebook (.npz)")
    p.command(_pretrain)

    p = Flags(sub.add_parser("pretrain-data", help="cache pre-training instances (static masking, dupe_factor)"),
              PretrainConfig)
    p.fields(DATA_FLAGS)
    p.fields({"train.out_dir": Flag(help="cache directory", name="--out", required=True)})
    p.add_argument("--dupe-factor", type=non_negative_int, default=5,
                   help="masked copies per instance (0: unmasked, for dynamic masking at training time)")
    p.command(_pretrain_data)

    p = sub.add_parser("plot", help="PNG curves (loss, MLM/NSP/SOP accuracy, lr) of a training run")
    p.add_argument("run_dir")
    p.add_argument("--out", default=None, help="PNG path (default RUN_DIR/curves.png)")
    p.set_defaults(func=_plot)


class PretrainFlags(Flags):
    """`bertfam pretrain`'s options, merged in one order with the resumed run's own config under the run file:
    defaults < the config saved in --resume's run < --config RUN.json < the command line.

    --config also reads a saved OUT/pretrain_config.json: its "train" section (the TrainConfig) gives the
    options of the same names (out_dir: --out). A trainer field that `bertfam pretrain` has no option for is
    passed over when it holds the command's own value, and named as unknown otherwise. The run it records is
    not resumed (its `resume` is left out): continuing a run is --resume RUN."""

    def load(self, path: str) -> dict:
        from ..runners.pretrain import PretrainConfig, old_run_config

        d = read_run_file(path)
        old = old_run_config(d, run_file=True)
        if old:
            from ..config import old_format

            raise old_format(path, old, path)
        if not isinstance(d.get("train"), dict):
            return d
        default = PretrainConfig.default_train()
        flat = PretrainConfig.flatten(d)
        flat.pop("resume", None)
        for k, v in d["train"].items():
            name = "out" if k == "out_dir" else k
            if name not in self.keys and v == getattr(default, k, object()):
                flat.pop(name, None)
        return flat

    def base(self, explicit: dict) -> dict:
        """The resumed run's own options (its saved config's), or its directory as --out when it saved none."""
        resume = explicit.get("resume")
        if not resume:
            return {}
        saved = self.resumed(resume)
        if saved is None:
            return {"out_dir": resume}
        from ..runners.pretrain import PretrainConfig

        keys = self.keys
        flat = PretrainConfig.flatten(saved.to_dict())
        return {keys[k]: v for k, v in flat.items() if k in keys}

    def build(self, args, start=None):
        """The run config; a resumed run's fields that have no option keep their saved values."""
        resume = getattr(args, "resume", None)
        return super().build(args, self.resumed(resume) if resume else None)

    @staticmethod
    def resumed(resume: str):
        from ..runners.pretrain import saved_run_config

        return saved_run_config(resume)

    def __call__(self, args) -> int:
        explicit = self.merge(args)
        if args.modality:  # multimodal members: bertfam/multimodal (docs/multimodal.md)
            from .multimodal import pretrain_from_generic_args

            return pretrain_from_generic_args(explicit)
        return self.func(args, self.build(args))


def _pretrain(args, pc) -> int:
    from ..runners.pretrain import run_pretraining

    set_threads(args)
    s = run_pretraining(pc)
    if s.get("already_complete"):  # not an error: re-running a finished pipeline step is a no-op
        print(f"{pc.resume}: already complete (step {s['steps']} of {s['total_steps']}); nothing changed")
        return 0
    print(f"pre-trained {s['steps']} steps ({s['train_instances']} instances, {s['tokens_per_s']:.0f} tokens/s); "
          f"model in {pc.out}")
    if s.get("written"):
        print(s["written"])
    return 0


def _pretrain_data(args, pc) -> int:
    from ..runners.pretrain import run_pretrain_data

    meta = run_pretrain_data(pc, args.dupe_factor)
    print(f"wrote {pc.out}: {meta['counts']['train']} training / {meta['counts']['eval']} evaluation instances "
          f"({meta['corpus_stats']})")
    return 0


def _plot(args) -> int:
    from ..runners.pretrain import run_plot

    print(f"wrote {run_plot(args.run_dir, args.out)}")
    return 0
