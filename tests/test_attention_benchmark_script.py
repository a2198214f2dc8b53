"""benchmarks/attention_kernels.py (bert-base's attention core against its parts and int8 candidates, issue #26)
runs for a minute on full-length batches, so it is not part of the suite; this smoke test runs its --quick mode
so that the script cannot rot, and checks what it reports."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "benchmarks", "attention_kernels.py")
ENV = dict(os.environ, PYTHONWARNINGS="ignore", PYTHONPATH=ROOT)
FLOAT = ("sdpa", "matmul")  # variants that return an attention output, checked against sdpa's
PARTS = ("parts: QKᵀ bmm", "parts: softmax", "parts: PV bmm")


def test_attention_kernels_benchmark_quick(tmp_path):
    out = tmp_path / "attn.json"
    r = subprocess.run([sys.executable, SCRIPT, "--quick", "--threads", "1", "--heads", "4", "--json", str(out)],
                       capture_output=True, text=True, timeout=300, cwd=ROOT, env=ENV)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.startswith("CPU: ") and "flags: " in r.stdout.splitlines()[0]
    res = json.loads(out.read_text())
    assert res["threads"] == 1 and res["heads"] == 4 and set(res["shapes"]) == {"2x32", "1x160"}
    for shape, cell in res["shapes"].items():
        for lab in (*FLOAT, *PARTS, "parts sum", "int8 quantized.matmul", "int8 qlinear per head"):
            assert lab in cell and ("best_ms" in cell[lab] or cell[lab]["error"]), (shape, lab)
        for lab in FLOAT:  # the float cores compute the same attention as SDPA
            assert cell[lab]["best_ms"] > 0 and cell[lab]["max_abs_diff"] < 1e-5, (shape, lab)
        assert cell["sdpa"]["max_abs_diff"] == 0.0
        assert ("matmul/128" in cell) == (shape == "1x160")  # blocks of 128 queries only where T > 128
        if "matmul/128" in cell:
            assert cell["matmul/128"]["max_abs_diff"] < 1e-5
        total = sum(cell[p]["best_ms"] for p in PARTS)
        assert abs(cell["parts sum"]["best_ms"] - total) < 1e-9 and cell["parts: softmax"]["rate"] is None
        flops = 4 * int(shape.split("x")[0]) * 4 * int(shape.split("x")[1]) ** 2 * 64  # 4 heads of 64
        assert abs(cell["sdpa"]["rate"] - flops / cell["sdpa"]["best_ms"] / 1e6) < 1e-6 * cell["sdpa"]["rate"]
        assert abs(cell["parts: QKᵀ bmm"]["rate"] * cell["parts: QKᵀ bmm"]["best_ms"] * 1e6 - flops / 2) < 1e-3 * flops
        assert ("bf16 sdpa" in cell) == res["native_bf16"]
    assert "1 x 160 tokens, 4 heads of 64" in r.stdout and "parts sum" in r.stdout


def test_attention_kernels_refuses_bad_options_in_one_line():
    for args, needle in ((["--shapes", "8by128"], "--shapes: '8by128' is not BxT"),
                         (["--shapes", "0x128"], "needs B and T of at least 1"),
                         (["--reps", "-1"], "--reps, --threads and --heads must be at least 1"),
                         (["--heads", "0"], "--reps, --threads and --heads must be at least 1")):
        r = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=120, cwd=ROOT,
                           env=ENV)
        assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and needle in r.stderr, (args, r.stderr)
