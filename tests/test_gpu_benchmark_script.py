"""benchmarks/gpu_mlm.py is run only on the rare sessions lent a GPU; this smoke test runs it on the CPU
with a tiny model so that it cannot rot in between: every engine must produce numbers, the parity
checks must hold, and the table must be written."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_gpu_benchmark_script_smoke_on_cpu(tmp_path):
    cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "gpu_mlm.py"), "--device", "cpu", "--tiny",
           "--out", str(tmp_path), "--batches", "1", "--warmup", "1", "--reps", "1"]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.load(open(tmp_path / "gpu_mlm.json"))
    assert res["parity"]["unpadded_vs_padded"] <= 1e-5
    assert res["parity"]["bertfam_vs_transformers"] <= 1e-4
    assert set(res["cases"]) == {"train 128", "train 16-512", "infer 16-512"}
    for case in res["cases"].values():
        assert set(case["engines"]) == {"bertfam", "bertfam-pad", "bertfam-padded", "transformers"}
        for eng in case["engines"].values():
            assert "error" not in eng, eng
            assert eng["tokens_s"] > 0 and eng["mfu"] is None  # no peak known for a CPU
    md = (tmp_path / "gpu_mlm.md").read_text()
    assert md.count("| train 128 ") == 4 and "MFU" in md


def test_gpu_benchmark_script_says_when_there_is_no_gpu(tmp_path):
    import pytest
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "gpu_mlm.py"), "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 2 and "no CUDA device" in r.stderr and len(r.stderr.strip().splitlines()) == 1
