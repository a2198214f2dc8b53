"""`bertfam export --onnx DIR OUT.onnx`."""
from __future__ import annotations

from ..config import LOAD_TASKS
from .common import non_negative_float, positive_int


def register(sub) -> None:
    p = sub.add_parser("export", help="export a model directory to ONNX (dynamic batch and length axes)")
    p.add_argument("--onnx", nargs=2, metavar=("DIR", "OUT.onnx"), required=True,
                   help="model directory (bertfam or Hugging Face) and the .onnx file to write")
    p.add_argument("--task", choices=LOAD_TASKS, default=None,
                   help="head to export (default: the checkpoint's own head; encoder: the bare backbone)")
    p.add_argument("--opset", type=positive_int, default=None, help="ONNX opset (default: the exporter's)")
    p.add_argument("--atol", type=non_negative_float, default=1e-4,
                   help="largest |onnxruntime - PyTorch| accepted by the check after export (default 1e-4)")
    p.add_argument("--no-verify", action="store_true", help="skip the onnxruntime vs PyTorch check")
    p.set_defaults(func=_export)


def _export(args) -> int:
    from ..errors import ConfigError
    from ..export.onnx import export_onnx, verify_onnx
    from ..checkpoint import from_pretrained

    src, out = args.onnx
    model = from_pretrained(src, task=args.task, load_tokenizer=False)
    info = export_onnx(model, out, opset=args.opset)
    print(f"wrote {out} (task {info['task'] or 'encoder'}; inputs {', '.join(info['inputs'])}; "
          f"outputs {', '.join(info['outputs'])}; axes batch x sequence dynamic)")
    if args.no_verify:
        return 0
    diffs = verify_onnx(out, model)
    worst = max(diffs.values())
    print("onnxruntime vs PyTorch, max abs difference: " + ", ".join(f"{k} {v:.2e}" for k, v in diffs.items()))
    if worst > args.atol:
        raise ConfigError(f"{out}: onnxruntime differs from PyTorch by {worst:.2e} (> --atol {args.atol})")
    return 0
