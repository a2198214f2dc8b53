"""`bertfam export --onnx DIR OUT.onnx [--int8]`."""
from __future__ import annotations

from ..config import LOAD_TASKS, TASK_ALIASES
from .common import non_negative_float, positive_int


def register(sub) -> None:
    p = sub.add_parser("export", help="export a model directory to ONNX (dynamic batch and length axes)")
    p.add_argument("--onnx", nargs=2, metavar=("DIR", "OUT.onnx"), required=True,
                   help="model directory (bertfam or Hugging Face) and the .onnx file to write")
    p.add_argument("--task", choices=LOAD_TASKS + tuple(TASK_ALIASES), default=None, metavar="TASK",
                   help=f"head to export: {', '.join(LOAD_TASKS)}, or a pipeline name ({', '.join(TASK_ALIASES)}) "
                        "(default: the checkpoint's own head; encoder: the bare backbone)")
    p.add_argument("--opset", type=positive_int, default=None, help="ONNX opset (default: the exporter's)")
    p.add_argument("--atol", type=non_negative_float, default=1e-4,
                   help="largest |onnxruntime - PyTorch| accepted by the check after export (default 1e-4)")
    p.add_argument("--no-verify", action="store_true", help="skip the onnxruntime vs PyTorch check")
    p.add_argument("--int8", action="store_true",
                   help="quantize the exported graph with onnxruntime (quantize_dynamic: int8 weights per channel, "
                        "activations per batch); checked against the PyTorch model by relative difference. A "
                        "bertfam int8 checkpoint exports as the weights it stands for; with int8 linear layers "
                        "it needs --int8")
    p.add_argument("--rtol", type=non_negative_float, default=None,
                   help="with --int8: largest accepted |onnxruntime - PyTorch| / max |PyTorch| of any output "
                        "(default: report it; how far int8 moves the outputs depends on the model)")
    p.set_defaults(func=_export)


def _export(args) -> int:
    import math
    import os

    from ..errors import ConfigError
    from ..export.onnx import export_onnx, onnx_session, verify_onnx
    from ..checkpoint import from_pretrained

    src, out = args.onnx
    if args.rtol is not None and not args.int8:
        raise ConfigError("--rtol is for --int8 exports (a float export is checked with --atol)")
    model = from_pretrained(src, task=args.task, load_tokenizer=False)
    info = export_onnx(model, out, opset=args.opset, int8=args.int8)
    print(f"wrote {out} (task {info['task'] or 'encoder'}; inputs {', '.join(info['inputs'])}; "
          f"outputs {', '.join(info['outputs'])}; axes batch x sequence dynamic"
          + (f"; int8, {os.path.getsize(out) / 1e6:.1f} MB)" if args.int8 else ")"))
    if args.int8:
        sess = onnx_session(out)  # the quantized graph must load, verified or not
        if args.no_verify:
            return 0
        diffs = verify_onnx(out, model, session=sess, relative=True)
        print(f"onnxruntime int8 vs PyTorch ({'bertfam int8' if model.config.quantization else 'float'}), max abs "
              "difference / max abs output: "
              + ", ".join(f"{k} {v:.2e}" for k, v in diffs.items()))
        worst = max(diffs.values())
        if not math.isfinite(worst) or (args.rtol is not None and worst > args.rtol):
            raise ConfigError(f"{out}: onnxruntime int8 differs from PyTorch by {worst:.2e} of the largest output"
                              + (f" (> --rtol {args.rtol})" if math.isfinite(worst) else ""))
        return 0
    if args.no_verify:
        return 0
    diffs = verify_onnx(out, model)
    worst = max(diffs.values())
    print("onnxruntime vs PyTorch, max abs difference: " + ", ".join(f"{k} {v:.2e}" for k, v in diffs.items()))
    if worst > args.atol:
        raise ConfigError(f"{out}: onnxruntime differs from PyTorch by {worst:.2e} (> --atol {args.atol})")
    return 0
