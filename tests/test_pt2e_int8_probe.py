"""benchmarks/pt2e_int8_probe.py (PyTorch's own static int8, PT2E + inductor, against bertfam's static int8)
runs for minutes on bert-base, so it is not part of the suite; this smoke test runs it on bert-tiny at a
small shape with one repetition so that the script cannot rot in between. Each variant must either give
finite numbers or (pt2e-int8 only, where its API does not import: torch 2.13 moved it to torchao) say why."""
import json
import math
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import pt2e_int8_probe as probe  # noqa: E402

pytestmark = pytest.mark.slow


def test_pt2e_int8_probe_smoke(tmp_path):
    try:
        probe.qdq_ops()
    except probe.Failed as e:
        pytest.skip(f"no PT2E quantized graph ops in this torch: {e}")
    why = probe.cxx_missing()
    if why:
        pytest.skip(why)
    out = tmp_path / "probe.json"
    cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "pt2e_int8_probe.py"), "--model", "bert-tiny",
           "--shapes", "2x32", "--reps", "1", "--warmup", "0", "--min-rep-s", "0", "--calib-batches", "2",
           "--threads", "1", "--compile-threads", "1", "--out", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT,
                       env=dict(os.environ, PYTHONWARNINGS="ignore"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Traceback" not in r.stdout + r.stderr
    res = json.loads(out.read_text())
    variants = res["shapes"]["2x32"]["variants"]
    assert list(variants) == list(probe.VARIANTS)
    try:
        probe.pt2e_api()
        pt2e = True
    except probe.Failed:
        pt2e = False
    for name, v in variants.items():
        if name == "pt2e-int8" and not pt2e:
            assert not v["ok"] and "not importable" in v["reason"], v
            assert res["pt2e_api"] is None
            continue
        assert v["ok"], (name, v)
        assert v["finite"], name
        for key in ("tokens_per_s", "max_abs_diff", "mean_abs_diff"):
            assert math.isfinite(v[key]) and v[key] >= 0, (name, key, v[key])
        assert v["tokens_per_s"] > 0, name
        if name.endswith("int8"):  # every linear layer became a oneDNN int8 kernel, and the error is int8's
            assert v["int8_linears_lowered"] == v["linear_layers"] > 0, v
        if name.endswith("int8"):
            assert 0 < v["max_abs_diff"] < 0.5, (name, v["max_abs_diff"])
    assert variants["compile-fp32"]["max_abs_diff"] < 1e-3
    assert variants["eager-fp32"]["max_abs_diff"] == 0
    assert not res["export_as_is"]["ok"] or res["export_as_is"] == {"ok": True}
