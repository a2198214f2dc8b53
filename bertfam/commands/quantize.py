"""`bertfam quantize SRC DST [--calibrate FILE]`: an int8 copy of a model directory, for CPU inference
(modeling/int8.py; with --calibrate static int8, modeling/int8_static.py).

The job is runners.export.run_quantize."""
from __future__ import annotations

from .common import NumberRange


def register(sub) -> None:
    from ..config import INT8_MODULES

    p = sub.add_parser("quantize", help="write an int8 copy of a model directory (int8 weights; activations "
                                         "quantized per batch, or with --calibrate at scales calibrated once; "
                                         "CPU inference only)")
    p.add_argument("src", help="model directory (bertfam or Hugging Face)")
    p.add_argument("dst", help="directory to write: config.json (with the quantization record), "
                               "model.safetensors (int8 tensors + scales, float32 rest), tokenizer files")
    p.add_argument("--modules", default=",".join(INT8_MODULES),
                   help=f"comma-separated modules to quantize (default: all of {','.join(INT8_MODULES)})")
    p.add_argument("--calibrate", metavar="FILE",
                   help="static int8: calibrate the activation scales on FILE's inputs (text, one per line: "
                        "TEXT or TEXT_A<TAB>TEXT_B; .jsonl with text / text_a, text_b or question, context; "
                        ".json SQuAD-layout MRC data); quantizes every encoder projection")
    p.add_argument("--weights-only", action="store_true",
                   help="int8 on disk only (method weight-int8): the weights load back as float32 and the model "
                        "computes in float, as its source does but with int8-rounded weights (a quarter of the "
                        "float32 file, no activation quantization)")
    p.add_argument("--calibration-batches", type=NumberRange(int, 1), default=None, metavar="N",
                   help="with --calibrate: batches of 8 inputs to observe, from the top of FILE (default 8)")
    p.set_defaults(func=_quantize)


def _quantize(args) -> int:
    import os

    from ..errors import ConfigError
    from ..runners.export import QuantizeConfig, run_quantize

    if args.calibration_batches is not None and not args.calibrate:
        raise ConfigError("quantize: --calibration-batches is for --calibrate (static int8)")
    modules = [m.strip() for m in args.modules.split(",") if m.strip()]
    r = run_quantize(QuantizeConfig(src=args.src, dst=args.dst, modules=modules, calibrate=args.calibrate,
                                    calibration_batches=args.calibration_batches or 8,
                                    weights_only=args.weights_only))
    a, b = r["src_bytes"], r["dst_bytes"]
    c = r.get("calibration")
    how = (f"static int8 calibrated on {c['inputs']} inputs ({c['tokens']} tokens) of {c['file']}" if c
           else "int8 weights, float computing" if args.weights_only else "int8")
    print(f"wrote {args.dst} ({how}: {os.path.basename(r['src_file'])} {_mb(a)} -> "
          f"{os.path.basename(r['dst_file'])} {_mb(b)}, {100 * b / a:.1f} % of the source)")
    return 0


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"
