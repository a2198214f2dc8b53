"""benchmarks/linear_kernels.py (which fp32 projection kernel, issue #26) runs for minutes on bert-base, so it is
not part of the suite; this smoke test runs its --quick mode so that the script cannot rot, and checks that
encoder_throughput.py's bertfam engines can be told the kernel (bertfam-mkl, ...) and answer as `bertfam`."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))


def test_linear_kernels_benchmark_quick(tmp_path):
    out = tmp_path / "lk.json"
    cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "linear_kernels.py"), "--quick", "--threads", "1",
           "--json", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT,
                       env=dict(os.environ, PYTHONWARNINGS="ignore", PYTHONPATH=ROOT))
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.startswith("CPU: ") and "flags: " in r.stdout.splitlines()[0]
    res = json.loads(out.read_text())
    from bertfam.modeling.linear import kernel_ops_present

    present = {k for k in ("mkl", "mkldnn") if kernel_ops_present(k)}
    gemm = res["gemm"]
    assert set(gemm["shapes"]) == {"768x2304", "768x768", "768x3072", "3072x768"}
    for shape, rows in gemm["shapes"].items():
        assert len(rows) == 3, shape  # two row counts and the fresh-row-count case
        for cell in rows.values():
            assert cell["aten"]["x_aten"] == 1.0 and cell["aten"]["gflops"] > 0
            for k in present:  # every kernel here measured (or its failure reported, never dropped)
                assert k in cell and ("gflops" in cell[k] or cell[k]["error"]), (shape, k)
    assert set(gemm["unavailable"]) == {"mkl", "mkldnn"} - present
    enc = res["encoder"]
    assert set(enc["cases"]) == {"infer 16-128", "infer full 128", "infer 16-512"}
    for case, row in enc["cases"].items():
        assert set(row) == {"aten", "mkl", "mkldnn", "auto"}, case
        assert row["aten"]["median"] > 0 and row["aten"]["x_aten"] == 1.0
        for lin, c in row.items():
            assert c.get("median", 0) > 0 or c["error"], (case, lin)
    settings = enc["settings"]
    for k in present:
        assert set(sum(settings[k]["kernels"].values(), [])) == {k}  # the swap really used the kernel
    assert "probe" in settings["auto"] and settings["auto"]["probe"]["probe_s"] > 0
    assert res["threads"] == 1


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    import bertfam
    from bertfam.convert.hf import export_hf

    d = tmp_path_factory.mktemp("tiny")
    cfg = bertfam.preset("bert-tiny", vocab_size=200, num_hidden_layers=2, max_position_embeddings=64,
                         head=bertfam.HeadConfig(task="mlm"))
    export_hf(bertfam.build_model(cfg, seed=0).eval(), str(d / "hf"))
    return str(d)


def test_encoder_throughput_takes_the_linear_engines(hf_dir, tmp_path, monkeypatch):
    import numpy as np
    from bench import cases
    from bench import engines as E

    from bertfam.modeling import linear as L

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))  # bertfam-auto probes here, not in ~/.cache
    assert set(E.LINEAR_ENGINES) <= set(E.INFER) and set(E.LINEAR_ENGINES) <= set(E.FP32)
    assert not set(E.LINEAR_ENGINES) & set(E.ALL)  # make bench's default set is unchanged
    b = cases.random_batch(np.random.default_rng(0), 3, 5, 40, 200)
    ref = E.load_hidden("bertfam", hf_dir)(b)
    seen = []  # kernels that ran through modeling/linear.py's packed path
    real = L.packed_linear
    monkeypatch.setattr(L, "packed_linear", lambda kernel, *a, **k: seen.append(kernel) or real(kernel, *a, **k))
    for e in E.LINEAR_ENGINES:
        out = E.load_hidden(e, hf_dir)(b)
        assert out.shape == ref.shape
        m = b["attention_mask"].bool()
        assert float((out - ref)[m].abs().max()) < 1e-4 * float(ref[m].abs().max()), e
    assert (tmp_path / "xdg" / "bertfam" / "linear_kernels.json").is_file()  # bertfam-auto probed
    assert set(seen) >= {k for k in ("mkl", "mkldnn") if L.kernel_ops_present(k)}  # the engines used them


def test_encoder_throughput_command_line_accepts_the_linear_engines():
    """--engines takes the bertfam-<kernel> names (an unknown name is refused before any work, naming only it)."""
    from bench import engines as E

    cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "encoder_throughput.py"),
           "--engines", ",".join(["bertfam", *E.LINEAR_ENGINES, "bertfam-nope"])]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 2 and "unknown engine(s) bertfam-nope;" in r.stderr, r.stderr[-2000:]
    assert all(e in r.stderr.split("valid:")[1] for e in E.LINEAR_ENGINES)
