"""benchmarks/encoder_throughput.py (`make bench`) runs for ~20 minutes, so it is not part of the suite; this
smoke test runs every case and engine once on bert-tiny so that the script cannot rot in between (its
training case once crashed with a NameError that no test saw)."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_encoder_benchmark_smoke(tmp_path):
    cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "encoder_throughput.py"), "--models", "bert-tiny",
           "--scale", "0.25", "--reps", "1", "--min-rep-s", "0", "--threads", "1", "--no-memory",
           "--out-dir", str(tmp_path), "--workdir", str(tmp_path / "work")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT,
                       env=dict(os.environ, PYTHONWARNINGS="ignore"))
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.load(open(tmp_path / "benchmarks.json"))
    cases = res["models"]["bert-tiny"]["cases"]
    assert set(cases) == {"infer 16-128", "infer full 128", "train MLM 16-128", "infer 16-512", "infer full 512"}
    for name, case in cases.items():
        want = {"transformers", "bertfam"} | ({"onnxruntime"} if name.startswith("infer") else set())
        assert set(case["engines"]) == want, name
        for eng in case["engines"].values():
            assert eng["median"] > 0 and eng["fraction_of_ceiling"] > 0
    prep = res["models"]["bert-tiny"]["prepare"]
    assert prep["diff_bertfam_vs_hf"] < 1e-4 and prep["diff_onnx_vs_hf"] < 1e-3
    assert "train MLM 16-128" in (tmp_path / "benchmarks.md").read_text()
