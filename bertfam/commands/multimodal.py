"""`bertfam multimodal ...`: VisualBERT / VideoBERT / SpeechBERT-style members (bertfam.multimodal).

Each sub-command turns its options into a `runners.multimodal` config and runs it there."""
from __future__ import annotations

import json
import logging
import os

from .common import (add_checkpoint_args, add_grad_accum_arg, add_threads_arg, check_window, float_range,
                     non_negative_int, open_fraction, positive_float, positive_int, probability, seed, set_threads,
                     train_config)
from .flags import Flags

log = logging.getLogger("bertfam")


def _train_args(p) -> None:
    p.add_argument("--features", required=True, metavar="DIR", help="directory with manifest.jsonl and feature files")
    p.add_argument("--manifest", default=None, help="manifest file (default: DIR/manifest.jsonl)")
    p.add_argument("--out", required=True, help="run directory")
    p.add_argument("--vocab", default=None, help="vocab.txt or tokenizer directory (default: the --init model's)")
    p.add_argument("--model-config", default="bert-tiny",
                   help="preset name or model config JSON for a new model (default bert-tiny)")
    p.add_argument("--init", default=None, help="start from a text checkpoint, a multimodal model or a Hugging Face "
                   "VisualBERT directory")
    p.add_argument("--max-length", type=positive_int, default=None, help="text tokens per sequence")
    p.add_argument("--eval-fraction", type=float_range(0, 1, hi_open=True), default=0.1,
                   help="records held out for evaluation")
    p.add_argument("--seed", type=seed, default=0)
    p.add_argument("--resume", default=None, help="resume an interrupted run (its directory or a checkpoint)")
    for name, typ in (("epochs", positive_float), ("max-steps", positive_int), ("batch-size", positive_int),
                      ("lr", positive_float), ("warmup-ratio", probability), ("log-every", positive_int),
                      ("eval-every", non_negative_int), ("save-every", non_negative_int)):
        p.add_argument(f"--{name}", type=typ, default=None)
    add_grad_accum_arg(p)
    p.add_argument("--no-progress", dest="progress", action="store_false", default=True)
    add_threads_arg(p)
    add_checkpoint_args(p, keep_last=1)
    g = p.add_argument_group("speech front end (WAV files are resampled to --sample-rate)")
    g.add_argument("--sample-rate", type=positive_int, default=16000)
    g.add_argument("--n-mels", type=positive_int, default=40)
    g.add_argument("--stack", type=positive_int, default=4, help="log-mel frames per input vector")
    g.add_argument("--max-frames", type=positive_int, default=256,
                   help="input vectors per utterance (longer audio is cut)")


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

    t = ModelConfigCompat(ms.add_parser("pretrain", help="pre-train: masked LM on text + features (image, speech: "
                                                         "+ match; video: cross-modal MLM over visual words)"))
    t.add_argument("--modality", choices=["image", "video", "speech"], required=True)
    _train_args(t)
    t.add_argument("--codebook", default=None, help="video: codebook from `bertfam multimodal vocab`")
    t.add_argument("--mask-rate", type=open_fraction, default=0.15)
    t.add_argument("--mismatch-prob", type=probability, default=0.5, help="image/speech: share of mismatched pairs "
                   "(0 turns the match objective off)")
    t.command(_pretrain)

    f = ModelConfigCompat(ms.add_parser("finetune", help="fine-tune: qa (spoken question over a text passage) or "
                                                         "classify"))
    f.add_argument("--modality", choices=["image", "speech"], required=True)
    f.add_argument("--task", choices=["qa", "classify"], required=True)
    _train_args(f)
    f.add_argument("--doc-stride", type=non_negative_int, default=None,
                   help="qa: overlap (tokens) of consecutive windows (default 32, cut to fit the window)")
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


class ModelConfigCompat(Flags):
    """--config once named the model config here. A --config value that is a preset name, a directory or a
    JSON file with `hidden_size` or `bertfam_config_version` (model-config fields; no option is named so) is
    still taken as --model-config, with a warning; any other value is a run file."""

    def merge(self, args) -> None:
        value = getattr(args, "config", None)
        if value is not None and is_model_config(value):
            from ..errors import ConfigError

            if hasattr(args, "model_config"):
                raise ConfigError(f"--config {value} is a model config and --model-config is given too: "
                                  "drop --config")
            log.warning("--config %s is a model config: read as --model-config %s (--config now names a run "
                        "file)", value, value)
            args.model_config = value
            del args.config
        super().merge(args)


def is_model_config(value: str) -> bool:
    from ..config import preset_names

    if value in preset_names() or os.path.isdir(value):
        return True
    if not (value.endswith(".json") and os.path.isfile(value)):
        return False
    try:
        with open(value, encoding="utf-8") as f:
            d = json.load(f)
    except (ValueError, UnicodeDecodeError):
        return False  # read as a run file, whose error names the file
    return isinstance(d, dict) and ("hidden_size" in d or "bertfam_config_version" in d)


def _common(args) -> dict:
    """The MultimodalRunConfig fields of the training commands' options."""
    from ..runners.multimodal import MultimodalRunConfig

    return dict(modality=args.modality, features=args.features, out=args.out, vocab=args.vocab,
                model_config=args.model_config, init=args.init, manifest=args.manifest,
                max_length=args.max_length, eval_fraction=args.eval_fraction, seed=args.seed, resume=args.resume,
                sample_rate=args.sample_rate, n_mels=args.n_mels, stack=args.stack, max_frames=args.max_frames,
                # options left unset (None) keep the multimodal defaults
                train=train_config(args, MultimodalRunConfig.default_train()))


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


def _pretrain(args) -> int:
    from ..runners.multimodal import MultimodalPretrainConfig, run_multimodal_pretrain

    cfg = MultimodalPretrainConfig(codebook=args.codebook, mask_rate=args.mask_rate,
                                   mismatch_prob=args.mismatch_prob, **_common(args))
    set_threads(args)
    return _report(run_multimodal_pretrain(cfg))


def _finetune(args) -> int:
    check_window(args)  # only a --doc-stride the user gave is compared
    from ..runners.multimodal import MultimodalFinetuneConfig, run_multimodal_finetune

    stride = args.doc_stride if args.doc_stride is not None else 32
    cfg = MultimodalFinetuneConfig(task=args.task, doc_stride=stride, **_common(args))
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


def pretrain_from_generic_args(args) -> int:
    """`bertfam pretrain --modality M --features DIR ...`: the text pre-training command's options mapped
    onto `bertfam multimodal pretrain` (its --max-seq-len is our --max-length)."""
    from ..errors import ConfigError
    from ..runners.multimodal import MultimodalPretrainConfig, run_multimodal_pretrain

    g = lambda name, default=None: getattr(args, name, default)  # noqa: E731 (options left out are absent)
    if not g("features") or not g("out"):
        raise ConfigError("pretrain --modality needs --features DIR and --out DIR")
    set_threads(args)
    # the trainer options `bertfam pretrain` was given
    train = train_config(args, MultimodalPretrainConfig.default_train())
    cfg = MultimodalPretrainConfig(modality=g("modality"), features=g("features"), out=g("out"), vocab=g("vocab"),
                                   model_config=g("model_config") or "bert-tiny", init=g("init"),
                                   codebook=g("codebook"), mask_rate=g("mask_rate") or 0.15, seed=g("seed") or 0,
                                   train=train, resume=g("resume"), max_length=g("max_seq_len"))
    return _report(run_multimodal_pretrain(cfg))
