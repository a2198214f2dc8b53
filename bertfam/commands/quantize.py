"""`bertfam quantize SRC DST`: an int8 copy of a model directory, for CPU inference (modeling/int8.py).

The job is runners.export.run_quantize."""
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

    from ..runners.export import QuantizeConfig, run_quantize

    modules = [m.strip() for m in args.modules.split(",") if m.strip()]
    r = run_quantize(QuantizeConfig(src=args.src, dst=args.dst, modules=modules))
    a, b = r["src_bytes"], r["dst_bytes"]
    print(f"wrote {args.dst} (int8: {os.path.basename(r['src_file'])} {_mb(a)} -> {os.path.basename(r['dst_file'])} "
          f"{_mb(b)}, {100 * b / a:.1f} % of the source)")
    return 0


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"
