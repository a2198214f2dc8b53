"""benchmarks/encoder_throughput.py (`make bench`) runs for ~40 minutes, so it is not part of the suite; this
smoke test runs every engine once on bert-tiny, in three of the five cases (mixed lengths up to 128, full
512, training), so that the script cannot rot in between (its training case once crashed with a NameError
that no test saw). The two cases left out run the same code on other batch shapes (each case is one worker
process of ~10 s, mostly imports and engine loading); their batches are checked below.

The OpenVINO engines need the optional `bench` extra (openvino, nncf): without it they must be reported
unavailable (with why), never crash the run, and their assertions are skipped. bertfam's int8 engines (dynamic,
and static calibrated on the OpenVINO engine's batches) must run in every inference case."""
import importlib.util
import json
import os
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = {"infer 16-128", "train MLM 16-128", "infer full 512"}  # the smoke run's (module docstring)
CORE_INFER = {"transformers", "transformers-int8", "onnxruntime", "onnxruntime-int8", "bertfam"}
OPENVINO = {"openvino", "openvino-int8w", "openvino-int8"}


def openvino_installed() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("openvino", "nncf"))


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "encoder_throughput.py"), "--models", "bert-tiny",
           "--scale", "0.25", "--reps", "1", "--min-rep-s", "0", "--threads", "1", "--no-memory",
           "--ceiling-scale", "0.0625", "--out-dir", str(out), "--workdir", str(out / "work"),
           "--cases", ",".join(sorted(CASES))]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT,
                       env=dict(os.environ, PYTHONWARNINGS="ignore"))
    assert r.returncode == 0, r.stderr[-3000:]
    (page,) = [p.name[:-len(".json")] for p in out.glob("benchmarks*.json")]  # one page, named by CPU kind
    return json.load(open(out / f"{page}.json")), (out / f"{page}.md").read_text(), r.stdout


def test_report_pages_are_named_by_cpu_kind():
    """One page per CPU kind: a run on an AVX-512 machine never overwrites the AVX2 page (and back)."""
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    from bench.probes import page_stem

    assert page_stem("AMD EPYC", ["avx", "avx2"]) == "benchmarks"
    assert page_stem("AMD EPYC", ["avx2", "avx512f", "avx512_vnni"]) == "benchmarks-epyc-avx512"  # family unknown
    # Zen 4 and Zen 5 are both "AMD EPYC" in a VM's model name with the same flag families: the family tells
    assert page_stem("AMD EPYC", ["avx512f", "avx512_vnni"], 25) == "benchmarks-epyc-zen4-avx512"
    assert page_stem("AMD EPYC", ["avx512f", "avx512_vnni"], 26) == "benchmarks-epyc-zen5-avx512"
    assert page_stem("AMD EPYC", ["avx512f"], 27) == "benchmarks-epyc-family27-avx512"
    assert page_stem("AMD EPYC", ["avx2"], 25) == "benchmarks"  # AVX2-only Zen 3 keeps the historical page
    assert page_stem("Intel(R) Xeon(R)", ["avx512f", "amx_tile"], 6) == "benchmarks-xeon-avx512-amx"


def test_cpu_family_is_read_from_cpuinfo(tmp_path):
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    from bench.probes import cpu_family

    f = tmp_path / "cpuinfo"
    f.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n")
    assert cpu_family(str(f)) == 25
    f.write_text("processor\t: 0\nmodel name\t: some ARM\n")
    assert cpu_family(str(f)) is None
    assert cpu_family(str(tmp_path / "missing")) is None


def test_every_case_makes_its_batches():
    """The five cases' batches (the smoke run times three): lengths in the case's range, full cases unpadded,
    the batch size and count of the case's row at scale 1."""
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    from bench import cases

    assert CASES < set(cases.CASES) and len(cases.CASES) == 5
    for name, (kind, B, lo, hi, n) in cases.CASES.items():
        batches = cases.make_batches(name, 1000)
        assert len(batches) == n and all(len(b["input_ids"]) == B for b in batches), name
        lengths = [int(x) for b in batches for x in b["attention_mask"].sum(1)]
        assert lo <= min(lengths) and max(lengths) <= hi, (name, lengths)
        assert (min(lengths) == max(lengths) == hi) == (lo == hi), name
        assert all(b["input_ids"].shape[1] == max(b["attention_mask"].sum(1)) for b in batches), name


def test_encoder_benchmark_smoke(bench):
    res, md, _ = bench
    model = res["models"]["bert-tiny"]
    cases = model["cases"]
    assert set(cases) == CASES
    for name, case in cases.items():
        if name.startswith("infer"):
            assert CORE_INFER <= set(case["engines"]), (name, case.get("unavailable"))
        else:
            assert set(case["engines"]) == {"transformers", "bertfam"}, name
        for e, eng in case["engines"].items():
            assert eng["median"] > 0 and eng["fraction_of_ceiling"] > 0 and eng["fraction_of_fp32_ceiling"] > 0
            assert eng["precision"] == ("int8" if "int8" in e else "fp32")
            if name.startswith("infer"):
                assert eng["fraction_of_int8_ceiling"] > 0
        # every engine asked for is either measured or reported unavailable with a reason
        if name.startswith("infer"):
            asked = set(res["engine_labels"])
            assert set(case["engines"]) | set(case["unavailable"]) == asked, name
            assert all(case["unavailable"].values())
    prep = model["prepare"]
    assert prep["diff_bertfam_vs_hf"] < 1e-4 and prep["diff_onnx_vs_hf"] < 1e-3
    # int8 is close to fp32 but not equal (tiny random model: ~1e-2 on values of ~1)
    for e in ("transformers-int8", "onnxruntime-int8"):
        assert 0 < model["engines"][e]["max_abs_diff_vs_hf"] < 0.5, e
    assert model["engines"]["onnxruntime-int8"]["int8_matmuls"] >= 12  # 2 layers x 6 linear layers
    assert "train MLM 16-128" in md and "transformers-int8" in md
    # one rate per repetition is kept, so the report pairs bertfam with its best peer repetition by repetition
    assert all(len(eng["rates"]) == 1 for case in cases.values() for eng in case["engines"].values())
    assert "; paired " in md


def test_encoder_benchmark_probes_bertfams_fp32_kernels_in_the_run(bench):
    """The fp32 kernel choice bertfam ran with is probed in the run (its cache in the workdir, not ~/.cache)
    and named on the page, shape by shape."""
    res, md, out = bench
    lp = res["models"]["bert-tiny"]["linear_probe"]
    shapes = {"128x384", "128x128", "128x512", "512x128"}  # bert-tiny: hidden 128, FFN 512
    assert set(lp["choice"]) == shapes and lp["rows"] == [64, 256, 1024] and lp["probe_s"] > 0
    assert all(len(times) == 3 for per in lp["seconds"].values() for times in per.values())
    line = next(x for x in md.splitlines() if x.startswith("bertfam's fp32 projection kernels, probed"))
    assert all(s in line for s in shapes)
    assert "bertfam's fp32 projection kernels" in out
    work = os.path.join(res["args"]["workdir"])
    assert any(name.startswith("linear-probe-") for name in os.listdir(work))


def test_encoder_benchmark_ceilings(bench):
    res, md, out = bench
    c = res["ceiling"]
    assert c["ceiling"] > 0 and c["int8_ceiling"] > 0 and "128x1024x1024" in c["int8_gops"]
    # each product's rate names the faster kernel it came from, and the report says so
    assert set(c["fp32_kernels"]) == set(c["gflops"]) and set(c["fp32_kernels"].values()) <= {"matmul", "onednn", "onnxruntime"}
    assert set(c["int8_kernels"]) == set(c["int8_gops"])
    assert set(c["int8_kernels"].values()) <= {"dynamic", "onednn-static", "onnxruntime-dynamic"}
    # onnxruntime's own kernels (the onnxruntime engines') are candidates too: a peer's faster kernel is part
    # of what the hardware can do
    assert c["fp32_compared"] == ["matmul", "onednn", "onnxruntime"]
    assert c["int8_compared"] == ["dynamic", "onednn-static", "onnxruntime-dynamic"]
    assert "fastest of torch's matmul; oneDNN's linear on a prepacked weight; and onnxruntime's MatMul" in md
    assert "`onednn.qlinear_pointwise`" in md and "onnxruntime's DynamicQuantizeMatMul" in md
    for name, case in res["models"]["bert-tiny"]["cases"].items():
        assert case["ceiling"] > 0
        assert (case.get("int8_ceiling", 0) > 0) == name.startswith("infer")
    assert "int8 GEMM ceiling (fastest of dynamic, onednn-static, onnxruntime-dynamic)" in out and "GOP/s" in md


def test_encoder_benchmark_openvino(bench):
    res, md, _ = bench
    model = res["models"]["bert-tiny"]
    if not openvino_installed():
        for e in OPENVINO:  # reported, not crashed
            assert not model["engines"][e]["available"] and "does not import" in model["engines"][e]["reason"]
        assert "Not measured here" in md
        pytest.skip("openvino / nncf not installed (pip install -e '.[bench]'): OpenVINO engines reported "
                    "unavailable, as they should be")
    for name, case in model["cases"].items():
        if name.startswith("infer"):
            assert OPENVINO <= set(case["engines"]), (name, case.get("unavailable"))
    assert model["engines"]["openvino"]["max_abs_diff_vs_hf"] < 1e-3  # the same fp32 weights
    assert 0 < model["engines"]["openvino-int8"]["max_abs_diff_vs_hf"] < 0.5
    assert model["engines"]["openvino-int8"]["calibration_batches"] > 0


@pytest.mark.parametrize("engine", ["bertfam-int8", "bertfam-int8-static"])
def test_encoder_benchmark_bertfam_int8(bench, engine):
    res, md, _ = bench
    model = res["models"]["bert-tiny"]
    # bertfam's int8 engines must have run in every inference case, close to fp32 but not equal
    assert model["engines"][engine]["available"], model["engines"][engine]
    assert 0 < model["engines"][engine]["max_abs_diff_vs_hf"] < 0.5
    for name, case in model["cases"].items():
        if name.startswith("infer"):
            assert engine in case["engines"], (name, case.get("unavailable"))
    assert f"| {engine} |" in md
    if engine == "bertfam-int8-static":  # calibrated on the batches nncf.quantize gets, saved, loaded back
        assert model["engines"][engine]["calibration_batches"] > 0


def test_a_ceiling_is_the_faster_kernel_and_a_failing_kernel_is_left_out():
    """probes._rates times each kernel of a product and drops one that raises (an op this CPU cannot run);
    the ceiling is the faster one's rate. The kernels compute the same product (oneDNN's against torch's)."""
    import torch

    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    from bench import probes

    def slow():
        time.sleep(0.01)

    def boom():
        raise RuntimeError("no such kernel here")

    rates = probes._rates({"slow": slow, "fast": lambda: None, "broken": boom}, 1.0, 2, 0, True)
    assert set(rates) == {"slow", "fast"} and rates["fast"] > rates["slow"]
    assert probes._best_kernel(rates)[0] == "fast"
    fns = probes.fp32_kernels(8, 16, 4)
    outs = {name: fn() for name, fn in fns.items()}
    assert "matmul" in outs and all(o.shape == (8, 4) for o in outs.values())
    if "onednn" in outs:
        assert torch.allclose(outs["onednn"], outs["matmul"], atol=1e-4)
    # onnxruntime's kernels run on a weight of their own (made once per shape): checked against it
    assert set(fns) == {"matmul", "onednn", "onnxruntime"} and outs["onnxruntime"].shape == (8, 4)
    sess, w = probes.ort_product(16, 4, False)
    x = torch.randn(8, 16)
    assert torch.allclose(torch.from_numpy(sess.run(None, {"x": x.numpy()})[0]), x @ torch.from_numpy(w), atol=1e-5)
    sess8, w8 = probes.ort_product(16, 4, True)
    y8 = torch.from_numpy(sess8.run(None, {"x": x.numpy()})[0])
    assert 0 < float((y8 - x @ torch.from_numpy(w8)).abs().max()) < 0.05  # int8: close, not equal
    assert set(probes.int8_kernels(8, 16, 4)) == {"dynamic", "onednn-static", "onnxruntime-dynamic"}
    assert probes.matmul_gflops(16, 16, 16, reps=1) > 0 and probes.int8_gops(16, 16, 16, reps=1) > 0


def test_old_results_without_kernel_names_render_as_before():
    """A results JSON written before the ceilings compared kernels renders with the old wording."""
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    from bench.report import ceiling_sentence

    old = {"ceiling": 180.0, "gflops": {"1024x768x3072": 180.0}, "int8_ceiling": 300.0,
           "int8_gops": {"2048x1024x1024": 300.0}}
    line = ceiling_sentence(old, {"torch_quantized_engine": "x86"}, True)
    assert line.startswith("fp32 matmul ceiling measured in this run (torch): **180.0 GFLOP/s**")
    assert "`torch.ops.quantized.linear_dynamic`" in line and "onednn" not in line
    two = dict(old, fp32_kernels={"1024x768x3072": "onednn"}, int8_kernels={"2048x1024x1024": "onednn-static"})
    line = ceiling_sentence(two, {}, True)
    assert "(1024x768x3072: 180.0 onednn)" in line and "(2048x1024x1024: 300.0 onednn-static)" in line
    assert "the faster of torch's matmul and oneDNN's linear" in line  # a run that compared two kernels
    three = dict(two, fp32_compared=["matmul", "onnxruntime"], int8_compared=["dynamic", "onnxruntime-dynamic"])
    line = ceiling_sentence(three, {"torch_quantized_engine": "x86"}, True)
    assert "the fastest of torch's matmul; and onnxruntime's MatMul" in line and "`matmul` / `onnxruntime`" in line
    assert "x86 backend" in line and "`dynamic` / `onnxruntime-dynamic`" in line


def test_paired_ratio_compares_within_each_repetition():
    """A slow spell of the machine halves both engines' rates from the second repetition on: the ratio of
    medians (52 / 50) mixes repetitions, the paired ratio is each repetition's own."""
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    from bench.report import best_peer, format_row, paired_peer, peer_text

    def eng(rates):
        return {"median": sorted(rates)[len(rates) // 2], "min": min(rates), "max": max(rates), "rates": rates}

    row = {"engines": {"transformers": eng([80.0, 41.0, 40.0]), "onnxruntime": eng([95.0, 50.0, 48.0]),
                       "bertfam": eng([100.0, 52.0, 50.0])}}
    assert best_peer(row, "bertfam") == (52.0 / 50.0, "onnxruntime")
    med, lo, hi = paired_peer(row, "bertfam")
    assert (med, lo, hi) == (50 / 48, 52 / 50, 100 / 95)
    assert peer_text(row, "bertfam") == "1.04 (onnxruntime); paired 1.04 [1.04-1.05]"
    assert "[1.04x onnxruntime; paired 1.04x [1.04-1.05]]" in format_row("m", "c", row)
    assert paired_peer(row, "onnxruntime") is None and peer_text(row, "transformers") == ""
    # results written before rates were kept (or with a rate missing) show the plain ratio only
    old = {"engines": {e: {k: v for k, v in s.items() if k != "rates"} for e, s in row["engines"].items()}}
    assert paired_peer(old, "bertfam") is None and peer_text(old, "bertfam") == "1.04 (onnxruntime)"
    row["engines"]["onnxruntime"]["rates"] = [95.0, 50.0]
    assert paired_peer(row, "bertfam") is None


def test_a_page_links_its_cpu_kinds_accuracy_page(tmp_path):
    """int8 accuracy differs by CPU kind (without VNNI the int8 kernels pack fitted weights): a page links
    its own kind's accuracy page where one exists, else the AVX2 one, saying so."""
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    from bench.report import accuracy_page

    assert accuracy_page(str(tmp_path), "benchmarks") == "[int8_accuracy.md](int8_accuracy.md)"
    other = accuracy_page(str(tmp_path), "benchmarks-epyc-zen4-avx512")
    assert other.startswith("[int8_accuracy.md](int8_accuracy.md) (measured on an AVX2-only CPU")
    (tmp_path / "int8_accuracy-epyc-zen4-avx512.md").write_text("page")
    assert accuracy_page(str(tmp_path), "benchmarks-epyc-zen4-avx512") == \
        "[int8_accuracy-epyc-zen4-avx512.md](int8_accuracy-epyc-zen4-avx512.md)"


def test_a_page_links_the_other_cpu_kinds_pages(tmp_path):
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    from bench.report import other_pages, others_sentence

    zen4 = {"cpu": "AMD EPYC", "cpu_family": 25, "simd": ["avx", "avx2", "avx512f", "avx512_vnni", "avx512bw"]}
    for stem, env in (("benchmarks", {"cpu": "AMD EPYC", "simd": ["avx2"]}), ("benchmarks-epyc-zen4-avx512", zen4)):
        (tmp_path / f"{stem}.json").write_text(json.dumps({"environment": env}))
        (tmp_path / f"{stem}.md").write_text("page")
    (tmp_path / "benchmarks-broken.json").write_text("{not json")  # no link rather than a broken one
    (tmp_path / "benchmarks-broken.md").write_text("page")
    (tmp_path / "benchmarks-nopage.json").write_text(json.dumps({"environment": zen4}))  # JSON without a page
    others = other_pages(str(tmp_path), "benchmarks")
    assert others == [("benchmarks-epyc-zen4-avx512", zen4)]
    line = others_sentence(others)
    assert "[benchmarks-epyc-zen4-avx512.md](benchmarks-epyc-zen4-avx512.md) (AMD EPYC, family 25: " \
           "avx2 avx512f avx512_vnni)" in line
    assert others_sentence([]) == "" and other_pages(str(tmp_path / "missing"), "benchmarks") == []
