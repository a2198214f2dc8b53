"""`bertfam multimodal ...`: VisualBERT / VideoBERT / SpeechBERT-style members (bertfam.multimodal).

Each sub-command turns its options into a `runners.multimodal` config and runs it there."""
from __future__ import annotations

import json

from .common import (CHECKPOINT_FLAGS, OPTIMIZATION_FLAGS, add_threads_arg, check_checkpoints, check_window,
                     float_range, non_negative_int, open_fraction, positive_float, positive_int, probability, seed,
                     set_threads, train_config)
from .flags import Flag, Flags


def _train_fields(p) -> None:
    """The options of a training run's MultimodalRunConfig fields (its trainer's: the multimodal defaults)."""
    p.fields({
        "features": Flag(help="directory with manifest.jsonl and feature files", metavar="DIR"),
        "manifest": Flag(help="manifest file (default: DIR/manifest.jsonl)"),
        "out": Flag(help="run directory"),
        "vocab": Flag(help="vocab.txt or tokenizer directory (default: the --init model's)"),
        "model_config": Flag(help="preset name or model config JSON for a new model (default bert-tiny)"),
        "init": Flag(help="start from a text checkpoint, a multimodal model or a Hugging Face VisualBERT "
                          "directory"),
        "max_length": Flag(positive_int, "text tokens per sequence"),
        "eval_fraction": Flag(float_range(0, 1, hi_open=True), "records held out for evaluation"),
        "train.seed": Flag(seed),
        "resume": Flag(help="resume an interrupted run (its directory or a checkpoint)"),
        "train.epochs": Flag(positive_float),
        "train.max_steps": Flag(positive_int),
        "train.batch_size": Flag(positive_int),
        "train.lr": Flag(positive_float),
        "train.warmup_ratio": Flag(probability),
        "train.log_every": Flag(positive_int),
        "train.eval_every": Flag(non_negative_int),
        "train.save_every": Flag(non_negative_int),
        "train.grad_accum": OPTIMIZATION_FLAGS["train.grad_accum"],
        "train.progress": Flag(name="--no-progress"),
    })
    add_threads_arg(p)
    p.add_argument_group("checkpoints").fields(CHECKPOINT_FLAGS)
    p.add_argument_group("speech front end (WAV files are resampled to --sample-rate)").fields({
        "sample_rate": Flag(positive_int),
        "n_mels": Flag(positive_int),
        "stack": Flag(positive_int, "log-mel frames per input vector"),
        "max_frames": Flag(positive_int, "input vectors per utterance (longer audio is cut)"),
    })


def register(sub) -> None:
    p = sub.add_parser("multimodal", help="VisualBERT / VideoBERT / SpeechBERT-style inputs on the same encoder")
    ms = p.add_subparsers(dest="mm_cmd", required=True)

    v = ms.add_parser("vocab", help="fit and save a k-means codebook of visual words (VideoBERT)")
    v.add_argument("--features", required=True, metavar="DIR")
    v.add_argument("--manifest", default=None)
    v.add_argument("--size", type=positive_int, default=1024, help="number of visual words")
    v.add_argument("--seed", type=seed, default=0)
    v.add_argument("--max-samples", type=positive_int, default=100_000, help="clip vectors used for k-means at most")
    v.add_argument("--out", required=True, help="codebook file (.npz)")
    v.set_defaults(func=_vocab)

    from ..runners.multimodal import MultimodalFinetuneConfig, MultimodalPretrainConfig

    t = Flags(ms.add_parser("pretrain", help="pre-train: masked LM on text + features (image, speech: + match; "
                                             "video: cross-modal MLM over visual words)"), MultimodalPretrainConfig)
    t.fields({"modality": Flag(choices=("image", "video", "speech"))})
    _train_fields(t)
    t.fields({
        "codebook": Flag(help="video: codebook from `bertfam multimodal vocab`"),
        "mask_rate": Flag(open_fraction),
        "mismatch_prob": Flag(probability, "image/speech: share of mismatched pairs (0 turns the match objective "
                                           "off)"),
    })
    t.command(_pretrain)

    f = Flags(ms.add_parser("finetune", help="fine-tune: qa (spoken question over a text passage) or classify"),
              MultimodalFinetuneConfig)
    f.fields({"modality": Flag(choices=("image", "speech")), "task": Flag(choices=("qa", "classify"))})
    _train_fields(f)
    f.fields({"doc_stride": Flag(non_negative_int, "qa: overlap (tokens) of consecutive windows (default 32, cut to "
                                                   "fit the window)")})
    f.command(_finetune)

    e = ms.add_parser("eval", help="evaluate a saved multimodal model (with the shuffled-features ablation)")
    e.add_argument("model")
    e.add_argument("--features", required=True, metavar="DIR")
    e.add_argument("--manifest", default=None)
    e.add_argument("--max-length", type=positive_int, default=128)
    e.add_argument("--batch-size", type=positive_int, default=32)
    e.set_defaults(func=_eval)

    c = ms.add_parser("convert", help="Hugging Face VisualBERT <-> bertfam multimodal directory")
    c.add_argument("--to", choices=["bertfam", "hf"], default="bertfam")
    c.add_argument("src")
    c.add_argument("dst")
    c.set_defaults(func=_convert)


def _report(summary: dict) -> int:
    if "report" in summary:  # the main process (under torchrun every rank ends here)
        print(json.dumps(summary["report"], indent=2))
    return 0


def _vocab(args) -> int:
    from ..runners.multimodal import MultimodalVocabConfig, run_multimodal_vocab

    info = run_multimodal_vocab(MultimodalVocabConfig(features=args.features, out=args.out, size=args.size,
                                                      manifest=args.manifest, seed=args.seed,
                                                      max_samples=args.max_samples))
    print(f"wrote {args.out} ({info['size']} visual words of dimension {info['dim']} over {info['clips']} clips; "
          f"{info['unused_words']} unused)")
    return 0


def _pretrain(args, cfg) -> int:
    from ..runners.multimodal import run_multimodal_pretrain

    check_checkpoints(args)
    set_threads(args)
    return _report(run_multimodal_pretrain(cfg))


def _finetune(args, cfg) -> int:
    check_window(args)  # only a --doc-stride the user gave is compared
    check_checkpoints(args)
    from ..runners.multimodal import run_multimodal_finetune

    set_threads(args)
    return _report(run_multimodal_finetune(cfg))


def _eval(args) -> int:
    from ..runners.multimodal import MultimodalEvalConfig, run_multimodal_eval

    print(json.dumps(run_multimodal_eval(MultimodalEvalConfig(model=args.model, features=args.features,
                                                              manifest=args.manifest, max_length=args.max_length,
                                                              batch_size=args.batch_size)), indent=2))
    return 0


def _convert(args) -> int:
    from ..runners.multimodal import MultimodalConvertConfig, run_multimodal_convert

    print(f"wrote {run_multimodal_convert(MultimodalConvertConfig(src=args.src, dst=args.dst, to=args.to))}")
    return 0


def pretrain_from_generic_args(given: dict) -> int:
    """`bertfam pretrain --modality M --features DIR ...`: the options the text pre-training command was given
    (its run file's and command line's, by destination) mapped onto `bertfam multimodal pretrain` (its
    --max-seq-len is our --max-length, its --out our out_dir)."""
    import argparse

    from ..errors import ConfigError
    from ..runners.multimodal import MultimodalPretrainConfig, run_multimodal_pretrain

    g = given.get
    if not g("features") or not g("out_dir"):
        raise ConfigError("pretrain --modality needs --features DIR and --out DIR")
    # the trainer options `bertfam pretrain` was given (the run directory is the multimodal run's own)
    options = argparse.Namespace(**{k: v for k, v in given.items() if k != "out_dir"})
    set_threads(options)
    # --seed is the trainer's (default: multimodal pretrain's), which draws the weights and the split too
    train = train_config(options, MultimodalPretrainConfig.default_train())
    cfg = MultimodalPretrainConfig(modality=g("modality"), features=g("features"), out=g("out_dir"), vocab=g("vocab"),
                                   model_config=g("model_config") or "bert-tiny", init=g("init"),
                                   codebook=g("codebook"), mask_rate=g("mask_rate") or 0.15, train=train,
                                   resume=g("resume"), max_length=g("max_seq_len"))
    return _report(run_multimodal_pretrain(cfg))
