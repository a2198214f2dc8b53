"""benchmarks/int8_accuracy.py (fp32 vs int8: hidden states, SST-2 accuracy, MRC F1) runs for many minutes on
the real models; this smoke test runs every section once on tiny random models saved here (a classifier and
a span model on the test vocabulary) with the test fixtures as dev sets, `--limit` examples.

OpenVINO engines: skipped where the `bench` extra (openvino, nncf) is not installed, but then they must be
reported unavailable, not crash. bertfam int8, dynamic and static: measured in every section."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from .conftest import FIXTURES, ZH_VOCAB

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SST2_DEV = os.path.join(FIXTURES, "finetune", "glue", "SST-2", "dev.tsv")
MRC_DEV = os.path.join(FIXTURES, "mrc", "checklist_demo_cut.json")
PEERS_INT8 = ("transformers-int8", "onnxruntime-int8")
OPENVINO_INT8 = ("openvino-int8w", "openvino-int8")


def openvino_installed() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("openvino", "nncf"))


@pytest.fixture(scope="module")
def acc(tmp_path_factory):
    from bertfam import HeadConfig, Tokenizer, build_model, preset

    out = tmp_path_factory.mktemp("int8acc")
    tok = Tokenizer.from_vocab(ZH_VOCAB)
    for name, head in (("cls", HeadConfig(task="classification", num_labels=2, labels=["0", "1"])),
                       ("span", HeadConfig(task="span"))):
        cfg = preset("bert-tiny", vocab_size=tok.vocab_size, num_hidden_layers=2, max_position_embeddings=512,
                     head=head)
        build_model(cfg, seed=0).save_pretrained(str(out / name), tokenizer=tok)
    cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "int8_accuracy.py"), "--models", "bert-tiny",
           "--limit", "6", "--threads", "1", "--sst2-model", str(out / "cls"), "--sst2-dev", SST2_DEV,
           "--mrc-model", str(out / "span"), "--mrc-dev", MRC_DEV, "--out-dir", str(out),
           "--workdir", str(out / "work")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT,
                       env=dict(os.environ, PYTHONWARNINGS="ignore"))
    assert r.returncode == 0, r.stderr[-3000:]
    pages = sorted(p.name for p in out.glob("int8_accuracy*"))
    stem = pages[0][:-len(".json")]  # this CPU kind's page (one pair: .json, .md)
    assert pages == [stem + ".json", stem + ".md"], pages
    return json.load(open(out / (stem + ".json"))), (out / (stem + ".md")).read_text()


def test_int8_accuracy_smoke(acc):
    res, md = acc
    assert res["limit"] == 6 and not res["skipped"]
    hidden = res["hidden"]
    assert len(hidden) == 3  # bert-tiny random weights + the two "real" models
    for name, h in hidden.items():
        for e in PEERS_INT8:
            s = h["engines"][e]["vs_own_fp32"]
            assert 0 < s["max_abs_diff"] < 0.5 and s["mean_abs_diff"] <= s["max_abs_diff"], (name, e)
        for e in ("onnxruntime", "bertfam"):  # fp32 engines: the same weights as transformers
            assert h["engines"][e]["vs_transformers_fp32"]["max_abs_diff"] < 1e-3, (name, e)
        assert all(r["available"] or r["reason"] for r in h["engines"].values())
    sst2 = res["sst2"]
    assert sst2["examples"] == 6
    for e in ("bertfam", "transformers", "transformers-int8"):
        assert 0 <= sst2["engines"][e]["accuracy"] <= 100
    assert sst2["fp32_max_abs_logit_diff_bertfam_vs_transformers"] < 1e-3
    assert 0 <= sst2["engines"]["transformers-int8"]["agreement_with_fp32"] <= 100
    mrc = res["mrc"]
    assert mrc["examples"] == 6 and mrc["engines"]["bertfam"]["all"]["n"] == 6
    assert "forced_answerable" in mrc["engines"]["bertfam"]
    for title in ("### Hidden states", "### SST-2 dev accuracy", "### MRC F1, int8 against fp32"):
        assert title in md


def test_int8_accuracy_names_the_cpu(acc):
    """Int8 kernels differ by CPU (without VNNI the static kernel packs 7-bit weights): the page says on which
    CPU it measured and what static int8 packed there, and is that CPU kind's page."""
    from bertfam.modeling.int8_static import exact_u8s8

    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import int8_accuracy as A
    from bench.probes import cpu_simd

    res, md = acc
    env = res["environment"]
    assert env["cpu"] == cpu_simd()[0] and env["simd"] == cpu_simd()[1]
    assert f"CPU: {env['cpu']}" in md
    packed = "8-bit weights" if exact_u8s8() else "fitted (no VNNI"
    assert f"Static int8 (bertfam-int8-static) packs {packed}" in md
    bench_page = "benchmarks" + A.page_stem(env)[len("int8_accuracy"):] + ".md"
    assert f"[{bench_page}]({bench_page})" in md


def test_int8_accuracy_page_per_cpu_kind():
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import int8_accuracy as A

    assert A.page_stem({"cpu": "AMD EPYC", "cpu_family": 25, "simd": ["avx", "avx2"]}) == "int8_accuracy"
    assert A.page_stem({"cpu": "AMD EPYC", "cpu_family": 25, "simd": ["avx2", "avx512f", "avx512_vnni"]}) \
        == "int8_accuracy-epyc-zen4-avx512"
    assert A.page_stem({"cpu": "Intel(R) Xeon(R) Platinum", "simd": ["avx2", "avx512f", "amx_int8"]}) \
        == "int8_accuracy-xeon-avx512-amx"
    assert A.cpu_line({}) == "CPU: not recorded."
    assert A.null_rule(-1e9) == "no null-score test" and A.null_rule(2.5) == "null threshold 2.50"
    line = A.cpu_line({"cpu": "AMD EPYC", "cpu_family": 25, "simd": ["avx2"], "static_int8_weights": "8-bit"})
    assert line.startswith("CPU: AMD EPYC, cpu family 25; flags: avx2.")


def test_int8_accuracy_openvino(acc):
    res, _ = acc
    engines = next(iter(res["hidden"].values()))["engines"]
    if not openvino_installed():
        assert all(not engines[e]["available"] and "does not import" in engines[e]["reason"]
                   for e in ("openvino",) + OPENVINO_INT8)
        pytest.skip("openvino / nncf not installed (pip install -e '.[bench]'): reported unavailable")
    assert engines["openvino"]["vs_transformers_fp32"]["max_abs_diff"] < 1e-3
    for e in OPENVINO_INT8:
        assert 0 < engines[e]["vs_own_fp32"]["max_abs_diff"] < 0.5, e


@pytest.mark.parametrize("engine", ["bertfam-int8", "bertfam-int8-static"])
def test_int8_accuracy_bertfam_int8(acc, engine):
    res, md = acc
    for name, h in res["hidden"].items():
        s = h["engines"][engine]["vs_own_fp32"]
        assert 0 < s["max_abs_diff"] < 0.5, name
    r = res["sst2"]["engines"][engine]
    assert r["available"] and "accuracy_change" in r and 0 <= r["agreement_with_fp32"] <= 100
    m = res["mrc"]["engines"][engine]
    assert m["available"] and 0 <= m["same_answer"] <= 6 and "F1_change" in m
    assert f"| {engine} |" in md
