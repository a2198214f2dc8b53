"""optimize_for_inference(linear=...): the encoder projections on prepacked fp32 weights (modeling/linear.py)
answer as the plain model within fp32 rounding, padded and packed, with and without buffer reuse; the swap
keeps the Parameters (names, values, save_pretrained); a changed weight is repacked; "auto" probes once per
machine and caches its choice (modeling/linear_probe.py)."""
import copy
import json
import logging
import os

import pytest
import torch
from torch import nn

import bertfam
from bertfam import ConfigError, HeadConfig
from bertfam.modeling import linear as L
from bertfam.modeling import linear_probe as P
from bertfam.modeling import optimize
from bertfam.modeling.optimize import optimize_for_inference

from .swap_helpers import restore_plain
from .test_varlen import _batch

PACKED = [k for k in ("mkl", "mkldnn") if L.kernel_ops_present(k)]
PACKING = {"packed": "auto", "padded": "padded"}


def _bert_base_layer():
    """One bert-base-shaped layer (768 hidden, 12 heads, 3072 FFN): the projection shapes that matter."""
    return bertfam.preset("bert-base", num_hidden_layers=1, vocab_size=300, max_position_embeddings=640)


def _calls(monkeypatch) -> list:
    """Kernels run through linear.packed_linear (the packed path taken), in order."""
    seen = []
    real = L.packed_linear
    monkeypatch.setattr(L, "packed_linear", lambda kernel, *a, **k: seen.append(kernel) or real(kernel, *a, **k))
    return seen


def _rel_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max()) / max(1e-6, float(b.abs().max()))


@pytest.mark.parametrize("kernel", PACKED)
@pytest.mark.parametrize("layout", list(PACKING))
@pytest.mark.parametrize("size", ["tiny", "bert-base"])
@pytest.mark.parametrize("reuse", [True, False], ids=["reuse", "noreuse"])
def test_packed_kernels_equal_the_plain_forward(tiny_cfg, kernel, layout, size, reuse, monkeypatch):
    if size == "tiny":
        cfg, B, T = tiny_cfg.replace(head=HeadConfig(task="token", num_labels=3)), 5, 17
        monkeypatch.setattr(L, "MKL_CHUNK", 16)  # several packed chunks plus a remainder in a tiny batch
    else:  # 4 x 300 = 1200 padded rows: four 256-row mkl chunks and a remainder; packed: fewer rows
        cfg, B, T = _bert_base_layer().replace(head=HeadConfig(task="token", num_labels=3)), 4, 300
    plain = bertfam.build_model(cfg, seed=0).eval()
    fast = optimize_for_inference(copy.deepcopy(plain), reuse_buffers=reuse, linear=kernel)
    assert L.kernels_in_use(fast) == {s: [kernel] for s in L.kernels_in_use(plain)}
    assert optimize.reuses_buffers(fast) == reuse
    kw = _batch(cfg, B=B, T=T, seed=3)
    seen = _calls(monkeypatch)
    with torch.inference_mode():
        a = plain(**kw, packing=PACKING[layout])
        b = fast(**kw, packing=PACKING[layout])
    assert seen and set(seen) == {kernel}, "the packed kernel did not run"
    assert len(seen) == 4 * cfg.num_hidden_layers  # the four projections of every layer
    for name in ("last_hidden_state", "logits"):
        x, y = getattr(b, name), getattr(a, name)
        assert x.shape == y.shape and _rel_diff(x, y) < 1e-4, (name, _rel_diff(x, y))


@pytest.mark.parametrize("kernel", PACKED)
def test_mkl_chunks_and_remainder_match_addmm(kernel, monkeypatch):
    """Row counts below, at, and across chunk boundaries, into a buffer and not, with and without bias."""
    monkeypatch.setattr(L, "MKL_CHUNK", 8)
    g = torch.Generator().manual_seed(0)
    for bias in (True, False):
        lin = nn.Linear(24, 40, bias=bias)
        w, bias_t = lin.weight.detach(), None if lin.bias is None else lin.bias.detach()
        p = L.pack(kernel, w)
        for M in (1, 7, 8, 9, 16, 29):
            x = torch.randn(M, 24, generator=g)
            want = torch.nn.functional.linear(x, w, bias_t)
            out = torch.full((M, 40), float("nan"))
            with torch.inference_mode():
                got = L.packed_linear(kernel, x, p, w, bias_t, out)
                got2 = L.packed_linear(kernel, x, p, w, bias_t)
            assert _rel_diff(got, want) < 1e-5 and _rel_diff(got2, want) < 1e-5, (M, bias)
            if kernel == "mkl":
                assert got is out  # written in place (buffer reuse keeps its buffers)


@pytest.mark.parametrize("kernel", PACKED)
def test_swap_keeps_parameters_names_and_saved_weights(tiny_cfg, kernel, tmp_path):
    model = bertfam.build_model(tiny_cfg.replace(head=HeadConfig(task="span")), seed=0).eval()
    names = {n: (id(p), p.detach().clone()) for n, p in model.named_parameters()}
    sd_keys = list(model.state_dict())
    assert optimize_for_inference(model, linear=kernel) is model
    optimize_for_inference(model, linear=kernel)  # idempotent
    lins = [m for _, _, m in L.projections(model)]
    assert lins and all(isinstance(m, L.PackedLinear) and m.kernel == kernel for m in lins)
    assert list(model.state_dict()) == sd_keys  # no packed tensor in the state dict
    for n, p in model.named_parameters():
        assert id(p) == names[n][0] and torch.equal(p, names[n][1]), n
    model.save_pretrained(tmp_path / "m")
    back = bertfam.from_pretrained(str(tmp_path / "m"))
    for n, p in back.named_parameters():
        assert torch.equal(p, names[n][1]), n
    twin = copy.deepcopy(model)  # the opaque packed tensors are dropped and rebuilt
    kw = _batch(model.config, B=3, T=9, seed=1)
    with torch.inference_mode():
        assert torch.equal(twin(**kw).start_logits, model(**kw).start_logits)
    assert restore_plain(model) is model
    assert all(type(m) is nn.Linear for _, _, m in L.projections(model))
    optimize_for_inference(model, linear=kernel)
    optimize_for_inference(model, linear="aten")  # back to the plain modules
    assert all(type(m) is nn.Linear for _, _, m in L.projections(model))


@pytest.mark.parametrize("kernel", PACKED)
def test_training_runs_plain_and_a_changed_weight_is_repacked(tiny_cfg, kernel, monkeypatch):
    cfg = tiny_cfg.replace(head=HeadConfig(task="token", num_labels=3))
    model = optimize_for_inference(bertfam.build_model(cfg, seed=0), linear=kernel)
    kw = _batch(cfg, B=3, T=9)
    seen = _calls(monkeypatch)
    model.train()
    model(**kw).logits.sum().backward()  # autograd: the plain F.linear (the packed ops have no backward)
    assert seen == []
    torch.optim.SGD(model.parameters(), lr=0.5).step()
    model.eval()
    with torch.enable_grad():
        model(**kw)  # eval mode, autograd on: still plain
    assert seen == []
    with torch.no_grad():
        got = model(**kw).logits
    assert seen  # the packed path, on the weights the optimizer changed (repacked: _version moved)
    plain = restore_plain(copy.deepcopy(model))
    with torch.inference_mode():
        want = plain(**kw).logits
    assert _rel_diff(got, want) < 1e-4
    sd = {k: v + 0.01 for k, v in model.state_dict().items()}
    model.load_state_dict(sd)  # in-place copies: repacked too
    with torch.inference_mode():
        got, want = model(**kw).logits, restore_plain(copy.deepcopy(model))(**kw).logits
    assert _rel_diff(got, want) < 1e-4


def test_packed_memory_is_counted():
    """The packed copies are extra memory beside the float weights, by tensor size (linear.py's docstring
    quotes these counts and the resident part)."""
    model = bertfam.build_model(_bert_base_layer(), seed=0).eval()
    weights = sum(m.weight.numel() * 4 for _, _, m in L.projections(model))  # 7.08M floats: 28.3 MB
    for kernel in PACKED:
        optimize_for_inference(model, linear=kernel)
        extra = L.packed_bytes(model)
        print(f"{kernel}: packed {extra / 1e6:.1f} MB beside {weights / 1e6:.1f} MB of projection weights "
              f"({extra / weights:.2f}x)")
        if kernel == "mkl":
            assert 1.0 < extra / weights < 5.0
        else:
            assert extra == weights
    optimize_for_inference(model, linear="aten")
    assert L.packed_bytes(model) == 0


def test_bad_linear_options_are_one_line_config_errors(tiny_cfg):
    m = bertfam.build_model(tiny_cfg, seed=0).eval()
    for kw, match in (({"linear": "fast"}, "linear 'fast' not in auto, aten, mkl, mkldnn"),
                      ({"linear": "mkl", "int8": True}, "excludes compile and int8"),
                      ({"linear": "mkldnn", "compile": True}, "excludes compile and int8")):
        with pytest.raises(ConfigError, match=match) as e:
            optimize_for_inference(m, **kw)
        assert "\n" not in str(e.value)
    assert all(type(x) is nn.Linear for _, _, x in L.projections(m))  # nothing changed on a refusal


# ---------------------------------------------------------------- "auto": the probe and its cache
@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(P, "PROBE_ROWS", (8, 24))  # a fast probe: the mechanism, not the speed, is tested
    monkeypatch.setattr(P, "PROBE_REPS", 1)
    return tmp_path / "xdg" / "bertfam" / P.CACHE_NAME


def _count_probes(monkeypatch) -> list:
    runs = []
    real = P.probe
    monkeypatch.setattr(P, "probe", lambda *a, **k: runs.append(1) or real(*a, **k))
    return runs


def test_auto_probes_once_caches_and_applies_its_choice(tiny_cfg, cache_home, monkeypatch):
    runs = _count_probes(monkeypatch)
    old = os.umask(0o027)
    try:
        m = optimize_for_inference(bertfam.build_model(tiny_cfg, seed=0).eval(), linear="auto")
    finally:
        os.umask(old)
    assert runs == [1] and cache_home.is_file()
    assert (cache_home.stat().st_mode & 0o777) == 0o640  # the umask's mode, not mkstemp's 0600
    data = json.loads(cache_home.read_text())
    (entry,) = data["entries"].values()
    shapes = {L.shape_class(x) for _, _, x in L.projections(m)}
    assert set(entry["choice"]) == shapes and entry["threads"] == torch.get_num_threads()
    assert {s: [k] for s, k in entry["choice"].items()} == L.kernels_in_use(m)
    optimize_for_inference(bertfam.build_model(tiny_cfg, seed=1).eval(), linear="auto")
    assert runs == [1]  # the cached choice
    n = torch.get_num_threads()
    torch.set_num_threads(n + 1)  # another thread count: another entry
    try:
        optimize_for_inference(bertfam.build_model(tiny_cfg, seed=1).eval(), linear="auto")
    finally:
        torch.set_num_threads(n)
    assert runs == [1, 1] and len(json.loads(cache_home.read_text())["entries"]) == 2


@pytest.mark.parametrize("garbage", ["{not json", "[]", '{"format": 1, "entries": 3}', "\xff\xfe"])
def test_a_corrupt_cache_is_ignored_with_one_warning_and_rewritten(tiny_cfg, cache_home, caplog, garbage,
                                                                   monkeypatch):
    cache_home.parent.mkdir(parents=True)
    cache_home.write_bytes(garbage.encode("latin-1"))
    runs = _count_probes(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="bertfam"):
        optimize_for_inference(bertfam.build_model(tiny_cfg, seed=0).eval(), linear="auto")
    warns = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warns) == 1 and "ignored and rewritten" in warns[0].getMessage()
    assert "\n" not in warns[0].getMessage()
    assert runs == [1] and json.loads(cache_home.read_text())["format"] == P.CACHE_FORMAT
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="bertfam"):
        optimize_for_inference(bertfam.build_model(tiny_cfg, seed=0).eval(), linear="auto")
    assert runs == [1] and not caplog.records


def test_probe_picks_the_fastest_and_skips_kernels_that_fail(monkeypatch):
    fake = {"aten": 1.0, "mkl": 0.5, "mkldnn": 0.8}
    monkeypatch.setattr(P, "_time_one", lambda kernel, x, w, b, reps, ref: fake[kernel])
    monkeypatch.setattr(L, "kernel_ops_present", lambda k: True)
    assert P.probe(["8x16"], rows=(4,), reps=1)["choice"] == {"8x16": "mkl"}
    fake.update(mkl=0.99, mkldnn=0.985)  # both within TIE of aten: the plain path keeps it
    assert P.probe(["8x16"], rows=(4,), reps=1)["choice"] == {"8x16": "aten"}

    def broken(kernel, x, w, b, reps, ref):
        if kernel == "mkldnn":
            raise RuntimeError("could not create a primitive descriptor\nsecond line")
        return {"aten": 1.0, "mkl": 2.0}[kernel]

    monkeypatch.setattr(P, "_time_one", broken)
    monkeypatch.setattr(L, "kernel_ops_present", lambda k: k != "mkl")
    r = P.probe(["8x16"], rows=(4,), reps=1)
    assert r["choice"] == {"8x16": "aten"}
    assert r["skipped"]["8x16"] == {"mkl": "op not in this torch build",
                                    "mkldnn": "RuntimeError: could not create a primitive descriptor"}


def test_probe_rejects_a_kernel_with_wrong_results(monkeypatch):
    real = L.packed_linear
    monkeypatch.setattr(L, "packed_linear", lambda *a, **k: real(*a, **k).add_(1.0))
    r = P.probe(["8x16"], rows=(4,), reps=1, kernels=("aten", *PACKED))
    assert r["choice"] == {"8x16": "aten"}
    skipped = r["skipped"]["8x16"]
    assert set(skipped) == set(PACKED) and all("wrong result" in why for why in skipped.values())


def test_the_real_probe_runs_every_kernel_here(cache_home):
    r = P.probe(["32x96"], rows=(8,), reps=1)
    assert set(r["seconds"]["32x96"]) | set(r["skipped"]["32x96"]) == set(L.KERNELS)
    assert set(PACKED) <= set(r["seconds"]["32x96"]), r["skipped"]  # this build and CPU run them
    assert r["choice"]["32x96"] in r["seconds"]["32x96"]


@pytest.mark.parametrize("kernel", PACKED)
def test_a_model_built_under_inference_mode_packs(tiny_cfg, kernel):
    """Inference tensors have no version counter; the packed cache must not need one."""
    with torch.inference_mode():
        plain = bertfam.build_model(tiny_cfg, seed=0).eval()
        kw = _batch(tiny_cfg, B=3, T=9, seed=1)
        want = plain(**kw).last_hidden_state
        fast = optimize_for_inference(copy.deepcopy(plain), linear=kernel)
        got = fast(**kw).last_hidden_state
    assert L.kernels_in_use(fast) == {s: [kernel] for s in L.kernels_in_use(plain)}
    assert _rel_diff(got, want) < 1e-4


def test_the_default_is_auto_for_a_float32_model_only(tiny_cfg, monkeypatch):
    """linear=None (every entry point's default) asks the probe for a float32 CPU model; an explicit aten keeps
    plain nn.Linear; an int8 model keeps its Int8Linear projections (the probe is never asked)."""
    asked = []
    monkeypatch.setattr(P, "choose", lambda shapes, path=None: asked.append(1) or {s: PACKED[-1] for s in shapes})
    if not PACKED:
        pytest.skip("no packed fp32 kernel in this torch build")
    m = optimize_for_inference(bertfam.build_model(tiny_cfg, seed=0).eval())
    assert asked == [1] and set(sum(L.kernels_in_use(m).values(), [])) == {PACKED[-1]}
    plain = optimize_for_inference(bertfam.build_model(tiny_cfg, seed=0).eval(), linear="aten")
    assert asked == [1] and set(sum(L.kernels_in_use(plain).values(), [])) == {"aten"}
    q = optimize_for_inference(bertfam.build_model(tiny_cfg, seed=0).eval(), int8=True)
    assert asked == [1] and set(sum(L.kernels_in_use(q).values(), [])) == {"int8"}
    # int8 word embeddings alone (as the shipped MRC reader has) leave float projections: those are packed
    from bertfam.modeling.int8 import quantize_int8

    e = quantize_int8(bertfam.build_model(tiny_cfg, seed=0).eval(), modules=("embeddings.word",))
    optimize_for_inference(e)
    assert asked == [1, 1] and set(sum(L.kernels_in_use(e).values(), [])) == {PACKED[-1]}
