"""BERT-base MLM training and inference on a GPU: bertfam vs transformers, same weights and batches.

    python3 benchmarks/gpu_mlm.py --out OUT_DIR                      # on a CUDA machine, ~5 min on an H200
    python benchmarks/gpu_mlm.py --device cpu --tiny --out OUT_DIR   # smoke test of this script (CPU)

It measures bf16 autocast with the flash / memory-efficient SDPA kernels: absolute tokens/s and model FLOP
utilisation for BERT-base MLM training. It needs torch, transformers, safetensors, tokenizers and numpy;
run it from the repository root (bertfam is imported from there).

Engines, all with bf16 autocast on CUDA (fp32 on CPU), fused AdamW, dropout on:
- `bertfam`: TaskModel (MLM head on the masked positions only), unpadded with the nested-jagged SDPA
  kernel (the CUDA default: flash / memory-efficient varlen kernels);
- `bertfam-pad`: the same unpadded encoder with the "pad" attention kernel (re-pad for attention only);
- `bertfam-padded`: the padded path, the like-for-like comparison with transformers;
each bertfam engine is the model's one packing setting, passed per call (`packing=`: "auto", "pad", "padded");
- `transformers`: BertForMaskedLM (sdpa), logits on every position, as its users run it.
Cases: `train 128` (every sequence 128 tokens: the MosaicBERT-style headline), `train 16-512` (lengths
uniform in 16-512: padding matters) and `infer 16-512` (forward only, inference_mode).
Reported per engine: real (non-padding) tokens/s (median of --reps timed repetitions after warm-up,
CUDA-synchronised), MFU = useful model FLOP/s / --peak-tflops (useful: encoder on real tokens plus the
MLM head on masked tokens, x3 for training; the same count for every engine), peak allocated GPU memory.
Also the max |difference| of bertfam unpadded vs padded and vs transformers (fp32, no autocast).
An engine that fails (an unsupported kernel, out of memory) is reported with its error; the rest go on.
Writes gpu_mlm.json and gpu_mlm.md to --out.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from bench.cases import model_flops, random_batch, real_tokens  # noqa: E402  (benchmarks/ is on the path)

# case: (kind, batch, min length, max length)
CASES = {"train 128": ("train", 256, 128, 128), "train 16-512": ("train", 64, 16, 512),
         "infer 16-512": ("infer", 256, 16, 512)}
ENGINES = ("bertfam", "bertfam-pad", "bertfam-padded", "transformers")
ENGINE_PACKING = {"bertfam": "auto", "bertfam-pad": "pad", "bertfam-padded": "padded"}  # bertfam's layout setting
PEAK_TFLOPS = {"H200": 989.4, "H100": 989.4, "A100": 312.0, "L40S": 362.1, "A10": 125.0}  # dense bf16


def batches(kind: str, B: int, lo: int, hi: int, vocab: int, n: int, seed: int = 0) -> list[dict]:
    """n random batches (bench.cases.random_batch), with 15 % of the real tokens masked for training."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        b = random_batch(rng, B, lo, hi, vocab)
        if kind == "train":
            ids = b["input_ids"]
            chosen = torch.from_numpy(rng.random(tuple(ids.shape)) < 0.15) & b["attention_mask"].bool()
            chosen[:, 0] = False
            b["labels"] = ids.masked_fill(~chosen, -100)
            b["input_ids"] = ids.masked_fill(chosen, 103)  # all [MASK]: 80/10/10 does not change the cost
        out.append(b)
    return out


def useful_flops(cfg, bs: list[dict], train: bool) -> float:
    """Encoder on real tokens (bench.cases.model_flops) + the MLM head on masked tokens (x3 to train)."""
    H, V = cfg.hidden_size, cfg.vocab_size
    head = sum(2 * int(b["labels"].ne(-100).sum()) * (H * H + H * V) for b in bs) if train else 0.0
    return model_flops(cfg, bs, train) + head * (3 if train else 1)


def make_engine(name: str, kind: str, d: str, device: torch.device, amp):
    """A callable batch -> None: one optimizer step (train) or one forward (infer)."""
    import transformers as T

    import bertfam

    if name == "transformers":
        cls = T.BertForMaskedLM if kind == "train" else T.BertModel
        model = cls.from_pretrained(os.path.join(d, "hf"), attn_implementation="sdpa").to(device)
        keys = ("input_ids", "attention_mask", "token_type_ids", "labels")
        extra = {}
    else:
        model = bertfam.from_pretrained(os.path.join(d, "bertfam"), task="mlm" if kind == "train" else None,
                                        load_tokenizer=False).to(device)
        if kind == "infer":  # prediction as the predictors run it (modeling/optimize.py)
            model = bertfam.optimize_for_inference(model.backbone)
        keys = ("input_ids", "attention_mask", "token_type_ids", "labels", "masked_positions")
        extra = {"packing": ENGINE_PACKING[name]}

    def feed(b):  # b is already on the device
        f = {k: v for k, v in b.items() if k in keys}
        if "labels" in f and "masked_positions" in keys:
            f["masked_positions"] = f["labels"].ne(-100)
        return f

    if kind == "infer":
        model.eval()

        def infer(b):
            with torch.inference_mode(), amp():
                model(**feed(b), **extra)
        return infer, model
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=device.type == "cuda")

    def step(b):
        with amp():
            loss = model(**feed(b), **extra).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step, model


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def time_engine(fn, bs, device, warmup: int, reps: int) -> list[float]:
    for b in bs[:warmup]:
        fn(b)
    sync(device)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for b in bs:
            fn(b)
        sync(device)
        times.append(time.perf_counter() - t0)
    return times


def parity(d: str, device: torch.device, vocab: int) -> dict:
    """fp32, no autocast: bertfam unpadded vs its padded path vs transformers on one mixed-length batch."""
    import transformers as T

    import bertfam

    b = {k: v.to(device) for k, v in batches("infer", 8, 16, 256, vocab, 1, seed=5)[0].items()}
    ours = bertfam.from_pretrained(os.path.join(d, "bertfam"), task=None, load_tokenizer=False).to(device).eval()
    hf = T.BertModel.from_pretrained(os.path.join(d, "hf"), attn_implementation="sdpa").to(device).eval()
    m = b["attention_mask"].bool()
    with torch.inference_mode():
        a = ours.backbone(**b).last_hidden_state
        p = ours.backbone(**b, packing="padded").last_hidden_state
        h = hf(**b).last_hidden_state
    return {"unpadded_vs_padded": float((a - p)[m].abs().max()),
            "bertfam_vs_transformers": float((a - h)[m].abs().max())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="bert-tiny, batches / 16: a smoke test of the script")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--batches", type=int, default=4, help="batches per repetition")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--peak-tflops", type=float, default=None, help="dense bf16 peak (default: by GPU name)")
    args = ap.parse_args()
    import bertfam
    from bertfam.convert.hf import export_hf

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("gpu_mlm: no CUDA device here (use --device cpu --tiny for a smoke test)", file=sys.stderr)
        return 2
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    peak = args.peak_tflops or next((v for k, v in PEAK_TFLOPS.items() if k in name), None)

    def amp():
        return torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")

    cfg = bertfam.preset("bert-tiny" if args.tiny else "bert-base-chinese", head=bertfam.HeadConfig(task="mlm"))
    d = tempfile.mkdtemp(prefix="bertfam-gpu-")
    model = bertfam.build_model(cfg, seed=0)
    model.save_pretrained(os.path.join(d, "bertfam"))
    export_hf(model, os.path.join(d, "hf"))
    del model
    results = {"device": name, "peak_tflops": peak, "torch": torch.__version__, "cases": {},
               "parity": parity(d, device, cfg.vocab_size)}
    print(f"{name}; peak {peak} TFLOP/s; parity {results['parity']}", flush=True)
    for case in args.cases.split(","):
        kind, B, lo, hi = CASES[case]
        B = max(2, B // 16) if args.tiny else B
        bs = batches(kind, B, lo, hi, cfg.vocab_size, args.batches, seed=1)
        real, flops = real_tokens(bs), useful_flops(cfg, bs, kind == "train")
        bs = [{k: v.to(device) for k, v in b.items()} for b in bs]  # transfers are not timed
        row = {}
        for eng in args.engines.split(","):
            try:
                if device.type == "cuda":
                    torch.cuda.empty_cache()
                    torch.cuda.reset_peak_memory_stats(device)
                fn, m = make_engine(eng, kind, d, device, amp)
                times = time_engine(fn, bs, device, args.warmup, args.reps)
                t = statistics.median(times)
                row[eng] = {"tokens_s": real / t, "spread": [real / max(times), real / min(times)],
                            "tflops": flops / t / 1e12,
                            "mfu": flops / t / 1e12 / peak if peak else None,
                            "peak_mem_gb": torch.cuda.max_memory_allocated(device) / 1e9 if device.type == "cuda"
                            else None}
                del fn, m
            except Exception as e:  # one failing engine must not lose the others' numbers
                row[eng] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
            print(case, eng, row[eng], flush=True)
        ref = row.get("transformers", {}).get("tokens_s")
        for r in row.values():
            if ref and "tokens_s" in r:
                r["x_transformers"] = r["tokens_s"] / ref
        results["cases"][case] = {"batch": B, "lengths": [lo, hi], "real_tokens": real, "engines": row}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "gpu_mlm.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(args.out, "gpu_mlm.md"), "w") as f:
        f.write(render(results))
    print(render(results))
    return 0


def render(res: dict) -> str:
    lines = [f"# BERT-base MLM on {res['device']} (torch {res['torch']}; peak {res['peak_tflops']} TFLOP/s bf16)", "",
             f"Parity (fp32): unpadded vs padded {res['parity']['unpadded_vs_padded']:.1e}, bertfam vs "
             f"transformers {res['parity']['bertfam_vs_transformers']:.1e}.", "",
             "| case | engine | real tokens/s | spread | ×HF | TFLOP/s | MFU | peak GPU GB |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for case, c in res["cases"].items():
        for eng, r in c["engines"].items():
            if "error" in r:
                lines.append(f"| {case} (batch {c['batch']}) | {eng} | failed: {r['error']} | | | | | |")
                continue
            mfu = f"{100 * r['mfu']:.1f} %" if r.get("mfu") is not None else "-"
            mem = f"{r['peak_mem_gb']:.1f}" if r.get("peak_mem_gb") is not None else "-"
            lines.append(f"| {case} (batch {c['batch']}) | {eng} | {r['tokens_s']:,.0f} | {r['spread'][0]:,.0f}-"
                         f"{r['spread'][1]:,.0f} | {r.get('x_transformers', float('nan')):.2f} | {r['tflops']:.2f} | "
                         f"{mfu} | {mem} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
