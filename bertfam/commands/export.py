"""`bertfam export --onnx DIR OUT.onnx [--int8]` (the job: runners.export)."""
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
    from ..errors import ConfigError
    from ..runners.export import OnnxExportConfig, run_onnx_check, run_onnx_export

    src, out = args.onnx
    exp = run_onnx_export(OnnxExportConfig(src=src, out=out, task=args.task, opset=args.opset, int8=args.int8,
                                           verify=not args.no_verify, atol=args.atol, rtol=args.rtol))
    print(exp.written)
    line, error = run_onnx_check(exp)
    if line:
        print(line)
    if error:
        raise ConfigError(error)
    return 0
