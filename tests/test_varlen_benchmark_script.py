"""benchmarks/varlen_kernels.py (the table in docs/varlen_kernels.md that chose varlen.default_kernel) runs for
minutes on bert-mini and bert-base, so it is not part of the suite; this smoke test runs it on bert-tiny
with one repetition so that the script cannot rot in between (it once stopped at its first model after the
encoder benchmark's worker options changed under it)."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROWS = ["bertfam unpadded, loop", "bertfam unpadded, njt", "bertfam unpadded, pad", "bertfam unpadded, block",
        "bertfam padded", "transformers"]


def test_varlen_kernels_benchmark_smoke(tmp_path):
    out = tmp_path / "varlen_kernels.md"
    cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "varlen_kernels.py"), "--models", "bert-tiny",
           "--reps", "1", "--threads", "1", "--scale", "0.25", "--out", str(out), "--workdir", str(tmp_path / "work")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT,
                       env=dict(os.environ, PYTHONWARNINGS="ignore"))
    assert r.returncode == 0, r.stderr[-3000:]
    md = out.read_text()
    assert "## bert-tiny" in md
    rows = {line.split(" | ")[0].lstrip("| "): line for line in md.splitlines() if line.startswith("| ")}
    from bertfam.modeling import fused_attention

    names = ROWS + (["bertfam unpadded, fused attention kernel"] if fused_attention.available() else [])
    for name in names:
        tokens_s = float(rows[name].split(" | ")[1])
        assert tokens_s > 0, name
    assert rows["transformers"].endswith("| 1.00 |")  # the ratio column is against transformers
