"""`bertfam quantize SRC DST`: an int8 copy of a model directory, for CPU inference (modeling/int8.py)."""
from __future__ import annotations


def register(sub) -> None:
    from ..config import INT8_MODULES

    p = sub.add_parser("quantize", help="write an int8 copy of a model directory (int8 weights, dynamic int8 "
                                         "activations; CPU inference only)")
    p.add_argument("src", help="model directory (bertfam or Hugging Face)")
    p.add_argument("dst", help="directory to write: config.json (with the quantization record), "
                               "model.safetensors (int8 tensors + scales, float32 rest), tokenizer files")
    p.add_argument("--modules", default=",".join(INT8_MODULES),
                   help=f"comma-separated modules to quantize (default: all of {','.join(INT8_MODULES)})")
    p.set_defaults(func=_quantize)


def _quantize(args) -> int:
    import os

    from ..checkpoint import from_pretrained, weights_file
    from ..errors import ConfigError
    from ..modeling.int8 import is_int8, quantize_int8

    modules = [m.strip() for m in args.modules.split(",") if m.strip()]
    if os.path.isdir(args.dst) and os.path.isdir(args.src) and os.path.samefile(args.src, args.dst):
        raise ConfigError(f"quantize: DST {args.dst} is SRC; write the int8 copy elsewhere (SRC stays float)")
    model = from_pretrained(args.src)
    if is_int8(model):
        raise ConfigError(f"quantize: {args.src} is already int8")
    quantize_int8(model, modules)
    model.config.head.info = {**model.config.head.info, "quantized_from": args.src}  # training_info.json
    model.save_pretrained(args.dst)
    src, dst = weights_file(args.src), weights_file(args.dst)
    a, b = os.path.getsize(src), os.path.getsize(dst)
    print(f"wrote {args.dst} (int8: {os.path.basename(src)} {_mb(a)} -> {os.path.basename(dst)} {_mb(b)}, "
          f"{100 * b / a:.1f} % of the source)")
    return 0


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"
