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
    assert {s: [L.label(*L.parse_spec(k))] for s, k in entry["choice"].items()} == L.kernels_in_use(m)
    assert entry["rows"] == [8, 24] and all(len(t) == 2 for d in entry["seconds"].values() for t in d.values())
    optimize_for_inference(bertfam.build_model(tiny_cfg, seed=1).eval(), linear="auto")
    assert runs == [1]  # the cached choice
    n = torch.get_num_threads()
    torch.set_num_threads(n + 1)  # another thread count: another entry
    try:
        optimize_for_inference(bertfam.build_model(tiny_cfg, seed=1).eval(), linear="auto")
    finally:
        torch.set_num_threads(n)
    assert runs == [1, 1] and len(json.loads(cache_home.read_text())["entries"]) == 2


@pytest.mark.parametrize("garbage", ["{not json", "[]", '{"format": %d, "entries": 3}' % P.CACHE_FORMAT, "\xff\xfe"])
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
    monkeypatch.setattr(P, "_race", lambda fns, reps: {k: fake[k] for k in fns})
    monkeypatch.setattr(L, "kernel_ops_present", lambda k: True)
    assert P.probe(["8x16"], rows=(4,), reps=1)["choice"] == {"8x16": "mkl"}
    fake.update(mkl=0.99, mkldnn=0.985)  # both within TIE of aten: the plain path keeps it
    assert P.probe(["8x16"], rows=(4,), reps=1)["choice"] == {"8x16": "aten"}

    real_calls = P._calls

    def broken(kernel, xs, w, b, refs):
        if kernel == "mkldnn":
            raise RuntimeError("could not create a primitive descriptor\nsecond line")
        return real_calls(kernel, xs, w, b, refs)

    fake.update(mkl=2.0)
    monkeypatch.setattr(P, "_calls", broken)
    monkeypatch.setattr(L, "kernel_ops_present", lambda k: k != "mkl")
    r = P.probe(["8x16"], rows=(4,), reps=1)
    assert r["choice"] == {"8x16": "aten"}
    assert r["skipped"]["8x16"] == {"mkl": "op not in this torch build",
                                    "mkldnn": "RuntimeError: could not create a primitive descriptor"}


def test_probe_times_each_row_count_and_keeps_a_kernel_where_it_wins(monkeypatch):
    """Per row count the probe races the kernels; the choice holds the packed kernel only at the row counts
    where it beat aten (the Zen 3 case: oneDNN faster at 64 rows, slower at 256 and 1,024)."""
    per_rows = {64: {"aten": 1.0, "mkl": 0.99, "mkldnn": 0.8}, 256: {"aten": 1.0, "mkl": 1.1, "mkldnn": 1.08},
                1024: {"aten": 1.0, "mkl": 1.2, "mkldnn": 1.15}}
    reps_seen = []

    def race(fns, reps):
        rows = next(iter(fns.values())).args[1].shape[0]  # functools.partial(addmm, b, x, ...) : x is args[1]
        reps_seen.append((rows, reps))
        return {k: per_rows[rows][k] for k in fns}

    monkeypatch.setattr(P, "_race", race)
    monkeypatch.setattr(L, "kernel_ops_present", lambda k: True)
    monkeypatch.setattr(P, "_calls", lambda kernel, xs, w, b, refs: [
        __import__("functools").partial(torch.addmm, b, x) for x in xs])
    r = P.probe(["8x16"], rows=(1024, 64, 256), reps=2)
    assert r["rows"] == [64, 256, 1024]
    assert r["choice"] == {"8x16": {"kernel": "mkldnn", "rows": [[0, 128]]}}
    assert r["seconds"]["8x16"]["mkldnn"] == [0.8, 1.08, 1.15]
    assert reps_seen == [(64, 8), (256, 8), (1024, 2)]  # short calls are repeated more (PROBE_MAX_REPS)


@pytest.mark.parametrize("aten,dnn,want", [
    ([1.0, 1.0, 1.0], [0.8, 1.1, 1.2], {"kernel": "mkldnn", "rows": [[0, 128]]}),
    ([1.0, 1.0, 1.0], [1.1, 0.8, 0.8], {"kernel": "mkldnn", "rows": [[128, None]]}),
    ([1.0, 1.0, 1.0], [0.8, 1.0, 0.8], {"kernel": "mkldnn", "rows": [[0, 128], [512, None]]}),
    ([1.0, 1.0, 1.0], [0.8, 0.9, 1.0], {"kernel": "mkldnn", "rows": [[0, 512]]}),
    ([1.0, 1.0, 1.0], [0.9, 0.9, 0.9], "mkldnn"),
    ([1.0, 1.0, 1.0], [0.98, 0.99, 1.2], "aten"),  # within TIE everywhere it is faster
])
def test_decide_turns_row_count_verdicts_into_row_ranges(aten, dnn, want):
    assert P.decide((64, 256, 1024), {"aten": aten, "mkldnn": dnn}) == want


def test_decide_takes_the_packed_kernel_that_saves_most_not_the_least_total():
    """mkl is least in total (the 1,024-row time dominates) but saves nothing where it is faster than aten by
    more than TIE; mkldnn saves 20 % at 64 rows: mkldnn runs there."""
    times = {"aten": [1.0, 4.0, 16.0], "mkl": [0.99, 4.0, 16.1], "mkldnn": [0.8, 4.4, 18.0]}
    assert P.decide((64, 256, 1024), times) == {"kernel": "mkldnn", "rows": [[0, 128]]}
    assert P.decide((64,), {"mkl": [2.0], "mkldnn": [1.0]}) == "mkldnn"  # no aten (a fake probe)
    assert P.decide((64,), {"aten": [1.0]}) == "aten"


@pytest.mark.skipif(not PACKED, reason="no packed fp32 kernel in this torch build")
def test_a_row_ranged_choice_runs_packed_only_in_its_ranges(tiny_cfg, monkeypatch):
    """The swapped projection runs its packed kernel for calls whose row count is in a range, addmm for the
    rest; outputs match the plain model either way."""
    kernel = PACKED[-1]
    plain = bertfam.build_model(tiny_cfg, seed=0).eval()
    shapes = L.kernels_in_use(plain)
    fast = optimize_for_inference(copy.deepcopy(plain), reuse_buffers=False,
                                  linear="aten")  # plain first; then the ranged choice
    L.swap_projections(fast, {s: {"kernel": kernel, "rows": [[0, 20]]} for s in shapes})
    assert set(sum(L.kernels_in_use(fast).values(), [])) == {f"{kernel} at 0-19 rows, else aten"}
    seen = _calls(monkeypatch)
    for B, T, packed in ((2, 9, True), (3, 30, False)):  # 10 real tokens: packed; 33 or more: addmm
        seen.clear()
        kw = _batch(tiny_cfg, B=B, T=T, seed=B)
        with torch.inference_mode():
            got, want = fast(**kw).last_hidden_state, plain(**kw).last_hidden_state
        assert _rel_diff(got, want) < 1e-4
        assert bool(seen) == packed and set(seen) <= {kernel}
    L.swap_projections(fast, kernel)  # a plain kernel name again: every row count
    assert set(sum(L.kernels_in_use(fast).values(), [])) == {kernel}


@pytest.mark.parametrize("spec", ["mkldnn2", {"kernel": "mkl"}, {"kernel": "mkl", "rows": []},
                                  {"kernel": "mkl", "rows": [[5, 3]]}, {"kernel": "mkl", "rows": [["0", None]]},
                                  {"kernel": "mkl", "rows": [[0, None]], "extra": 1}])
def test_bad_specs_are_refused_and_a_cache_holding_one_is_probed_again(spec, cache_home, monkeypatch):
    with pytest.raises(ValueError):
        L.parse_spec(spec)
    key, facts = P.cache_key(["8x16"])
    cache_home.parent.mkdir(parents=True)
    cache_home.write_text(json.dumps({"format": P.CACHE_FORMAT, "entries": {key: {"choice": {"8x16": spec}}}}))
    runs = _count_probes(monkeypatch)
    P.choose(["8x16"])
    assert runs == [1]


def test_an_older_cache_format_is_probed_again_without_a_warning(cache_home, caplog, monkeypatch):
    key, facts = P.cache_key(["8x16"])
    cache_home.parent.mkdir(parents=True)
    cache_home.write_text(json.dumps({"format": 1, "entries": {key: {"choice": {"8x16": "mkl"}}}}))
    runs = _count_probes(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="bertfam"):
        P.choose(["8x16"])
    assert runs == [1] and not caplog.records
    assert json.loads(cache_home.read_text())["format"] == P.CACHE_FORMAT


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


def test_info_kernels_prints_the_choice_and_reprobe_replaces_it(tiny_cfg, cache_home, tmp_path, monkeypatch,
                                                                capsys):
    """`bertfam info DIR --kernels` names the kernel per projection shape with the probe's times per row count,
    probing once; --reprobe probes again; --reprobe alone is an option error; an int8 model has no choice."""
    from bertfam.cli import main
    from bertfam.modeling.int8 import quantize_int8

    d = tmp_path / "m"
    model = bertfam.build_model(tiny_cfg, seed=0)
    model.save_pretrained(str(d))
    runs = _count_probes(monkeypatch)
    assert main(["info", str(d), "--kernels"]) == 0
    out = capsys.readouterr().out
    shapes = {L.shape_class(x) for _, _, x in L.projections(model)}
    assert runs == [1] and all(s in out for s in shapes) and out.count("ms at 8/24 rows: aten ") == len(shapes)
    assert str(cache_home) in out
    assert main(["info", str(d), "--kernels"]) == 0 and runs == [1]  # the cached choice
    assert capsys.readouterr().out.splitlines()[2:] == out.splitlines()[2:]
    assert main(["info", str(d), "--kernels", "--reprobe"]) == 0 and runs == [1, 1]
    capsys.readouterr()
    assert main(["info", str(d), "--reprobe"]) == 2
    assert "--reprobe needs --kernels" in capsys.readouterr().err
    assert optimize.uses_fp32_kernels(model) and not optimize.uses_fp32_kernels(quantize_int8(model))
