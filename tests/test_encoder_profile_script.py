"""benchmarks/encoder_profile.py (op-by-op profile of a bertfam engine's forward, issue #26) runs for a minute on
bert-base; this smoke test runs its --quick mode (bert-tiny) on the fp32 and the static int8 engine so that it
cannot rot, and checks that each profile holds its engine's projection kernel and that a bad option is one
line and exit 2."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "benchmarks", "encoder_profile.py")


@pytest.mark.parametrize("engine,kernel", [("bertfam", None), ("bertfam-int8-static", "onednn::qlinear_pointwise")])
def test_profile_quick(tmp_path, engine, kernel):
    out = tmp_path / "p.json"
    r = subprocess.run([sys.executable, SCRIPT, "--quick", "--engine", engine, "--threads", "1", "--json", str(out)],
                       capture_output=True, text=True, timeout=300, cwd=ROOT, env=dict(os.environ, PYTHONWARNINGS="ignore"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.startswith("CPU: ") and f"{engine} bert-tiny infer full 128" in r.stdout
    res = json.loads(out.read_text())
    assert res["tokens_per_s"] > 0 and res["real_tokens"] > 0 and len(res["ops"]) == 12
    shares = [o["share"] for o in res["ops"]]
    assert shares == sorted(shares, reverse=True) and 0 < sum(shares) <= 1.0 + 1e-9
    ops = {o["op"] for o in res["ops"]}
    if kernel:
        assert kernel in ops, ops
    else:  # fp32: whichever projection kernel the probe chose here, some matmul is among the top ops
        assert ops & {"aten::addmm", "aten::mm", "mkldnn::_linear_pointwise", "mkl::_mkl_linear"}, ops


def test_bad_options_are_one_line_and_exit_2():
    for bad, want in ((["--engine", "openvino"], "--engine: 'openvino' not in"),
                      (["--case", "train MLM 16-128"], "--case: 'train MLM 16-128' not in"),
                      (["--reps", "0"], "--reps: must be at least 1")):
        r = subprocess.run([sys.executable, SCRIPT, *bad], capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert r.returncode == 2 and r.stderr.strip().startswith(want) and len(r.stderr.strip().splitlines()) == 1, r.stderr
