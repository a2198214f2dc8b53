"""onnxruntime vs bertfam PyTorch inference on this CPU, same model, same inputs, same thread count.

Exports the model (a random `--preset` with a classification head, or `--model DIR`), checks the two agree
(max |diff| on real tokens), then times both on several (batch, length) shapes: the median of --repeat runs
after warm-up. Half the rows of each batch carry 25% padding, as dynamic batches of real requests do.

    .venv/bin/python benchmarks/onnx_vs_torch.py --preset bert-small --threads 1
    .venv/bin/python benchmarks/onnx_vs_torch.py --model runs/mrc --out onnx.json
"""
from __future__ import annotations

import argparse
import inspect
import json
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def feed_for(model, batch: int, length: int, seed: int) -> dict:
    import torch

    from bertfam.export.onnx import example_inputs

    f = example_inputs(model, batch, length, seed)
    mask = torch.ones(batch, length, dtype=torch.long)
    for row in range(0, batch, 2):  # every other row: last quarter is padding
        mask[row, length - length // 4:] = 0
    f["input_ids"] = f["input_ids"].masked_fill(mask == 0, model.config.pad_token_id)
    f["attention_mask"] = mask
    return f


def timed(fn, repeat: int) -> float:
    fn()
    fn()  # warm-up
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="model directory (default: a random --preset model)")
    ap.add_argument("--preset", default="bert-small")
    ap.add_argument("--vocab-size", type=int, default=21128)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--shapes", default="1x32,1x128,8x128,32x128", help="BATCHxLENGTH,...")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--out", help="write results as JSON here")
    args = ap.parse_args()

    import numpy as np
    import torch

    import bertfam
    from bertfam.export.onnx import export_onnx, onnx_session

    torch.set_num_threads(args.threads)
    if args.model:
        model = bertfam.from_pretrained(args.model, load_tokenizer=False)
        name = args.model
    else:
        cfg = bertfam.preset(args.preset, vocab_size=args.vocab_size,
                             head=bertfam.HeadConfig(task="classification", num_labels=2))
        model = bertfam.build_model(cfg, seed=0)
        name = f"{args.preset} (random, classification head)"
    bertfam.optimize_for_inference(model.eval())  # PyTorch side as the predictors run it
    path = os.path.join(tempfile.mkdtemp(prefix="bertfam-onnx-"), "model.onnx")
    t0 = time.perf_counter()
    info = export_onnx(model, path)
    export_s = time.perf_counter() - t0
    sess = onnx_session(path, threads=args.threads)
    in_names = [i.name for i in sess.get_inputs()]
    first = info["outputs"][0]
    # bertfam skips padding tokens by default (unpadded encoder); packing="padded" runs the padded computation
    padded_ok = "packing" in inspect.signature(model.forward).parameters
    rows = []
    for k, shape in enumerate(args.shapes.split(",")):
        b, t = (int(x) for x in shape.lower().split("x"))
        feed = feed_for(model, b, t, seed=k)
        np_feed = {n: feed[n].numpy() for n in in_names}

        def run_torch():
            with torch.inference_mode():
                return getattr(model(**feed), first)

        def run_ort():
            return sess.run([first], np_feed)[0]

        def run_torch_padded():  # the same computation as the ONNX graph: padding positions included
            with torch.inference_mode():
                return getattr(model(**feed, packing="padded"), first)

        ref, got = run_torch().float(), torch.from_numpy(run_ort()).float()
        diff = (got - ref).abs()
        if diff.dim() >= 2 and diff.shape[:2] == (b, t):
            diff = diff[feed["attention_mask"].bool()]  # per-token outputs: real tokens only
        tt, to = timed(run_torch, args.repeat), timed(run_ort, args.repeat)
        tp = timed(run_torch_padded, args.repeat) if padded_ok else float("nan")
        rows.append({"batch": b, "length": t, "torch_ms": round(1000 * tt, 2), "onnxruntime_ms": round(1000 * to, 2),
                     "torch_padded_ms": round(1000 * tp, 2), "onnx_speedup": round(tt / to, 2),
                     "max_abs_diff": float(diff.max())})
    res = {"model": name, "task": info["task"], "threads": args.threads, "export_s": round(export_s, 1),
           "torch": torch.__version__, "onnxruntime": __import__("onnxruntime").__version__,
           "params_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 1), "rows": rows}
    print(f"{name}: {res['params_m']}M parameters, {args.threads} thread(s), export {res['export_s']} s")
    print(f"{'batch':>5} {'len':>5} {'torch ms':>10} {'torch padded':>13} {'ort ms':>10} {'ort speedup':>12} "
          f"{'max |diff|':>11}")
    for r in rows:
        print(f"{r['batch']:>5} {r['length']:>5} {r['torch_ms']:>10} {r['torch_padded_ms']:>13} "
              f"{r['onnxruntime_ms']:>10} {r['onnx_speedup']:>11}x {r['max_abs_diff']:>11.1e}")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(res, f, indent=2)
    return 0 if all(np.isfinite(r["max_abs_diff"]) and r["max_abs_diff"] <= 1e-4 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
