"""The fused CPU attention kernel (modeling/fused_attention.py): its numbers against a float64 reference, its
input checks, its use by optimize_for_inference (and only there), and the fall-back where it cannot run."""
import copy
import math

import pytest
import torch

import bertfam
from bertfam.errors import ConfigError
from bertfam.modeling import fused_attention as fa
from bertfam.modeling import varlen
from bertfam.modeling.attention import SelfAttention
from bertfam.modeling.optimize import optimize_for_inference, set_fused_attention

needs_kernel = pytest.mark.skipif(not fa.cpu_supports(torch.float32), reason="the kernel needs AVX2 or AVX-512")
needs_bf16 = pytest.mark.skipif(not fa.cpu_supports(torch.bfloat16), reason="bf16 needs AVX512_BF16")

# every tail the kernel has: a single token, one short of / exactly / one past a 16-key block and an 8-row
# query block, odd counts (the bf16 kernel pairs keys), an empty sequence, and longer ones
LENGTHS = [1, 2, 7, 8, 9, 15, 16, 17, 0, 33, 64, 130]


def _qkv(lengths, heads, d, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    N = sum(lengths)
    qkv = (torch.randn(N, 3, heads, d, generator=g) * 1.5).to(dtype)
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int64)
    return qkv, cu


def _plan(cu):
    """The packed plan of torch's cores for these bounds, the empty sequence left out (they never get one)."""
    cu = torch.unique_consecutive(cu)
    lengths = (cu[1:] - cu[:-1]).tolist()
    return varlen.Packed(torch.arange(int(cu[-1])), cu, lengths, len(lengths), max(lengths))


def _reference(qkv, cu):
    """softmax(q kᵀ / √d) v per sequence in float64 -> (N, h, d)."""
    out = torch.empty(qkv.shape[0], qkv.shape[2], qkv.shape[3], dtype=torch.float64)
    for s, e in zip(cu[:-1].tolist(), cu[1:].tolist()):
        if e > s:
            q, k, v = qkv[s:e].double().permute(1, 2, 0, 3)  # each (h, L, d)
            p = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), -1)
            out[s:e] = (p @ v).transpose(0, 1)
    return out


@needs_kernel
@pytest.mark.parametrize("d", [32, 64])
def test_float32_matches_the_float64_reference(d):
    qkv, cu = _qkv(LENGTHS, 3, d, torch.float32)
    assert fa.usable(qkv)
    out = fa.varlen_attention(qkv, cu)
    assert out.shape == (qkv.shape[0], 3, d) and out.dtype == torch.float32
    err = (out.double() - _reference(qkv, cu)).abs().max().item()
    assert err < 1e-5, err
    sdpa = varlen.attention(qkv, _plan(cu))
    assert err <= 2 * (sdpa.view_as(out).double() - _reference(qkv, cu)).abs().max().item() + 1e-7


@needs_bf16
@pytest.mark.parametrize("d", [32, 64])
def test_bfloat16_is_closer_to_the_reference_than_the_two_matmul_core(d):
    """Its scores and probabilities stay fp32 (only q, k, v, P for PV and the output are bf16); the two-matmul
    core rounds the scores and the probabilities to bf16 as well."""
    qkv, cu = _qkv(LENGTHS, 3, d, torch.bfloat16, seed=1)
    ref = _reference(qkv, cu)
    out = fa.varlen_attention(qkv, cu)
    assert out.dtype == torch.bfloat16
    err = (out.double() - ref).abs().max().item()
    with torch.inference_mode():
        core = varlen.attention(qkv, _plan(cu), matmul_up_to=1 << 20).view_as(out)
    core_err = (core.double() - ref).abs().max().item()
    assert err < 0.05 and err < core_err, (err, core_err)


@needs_kernel
def test_out_buffer_thread_count_and_a_batch_of_equal_lengths():
    """Written into `out` and returned; each (sequence, head) is one thread's work, so the thread count does
    not change a bit; an unpadded (B, T) batch is the packed one with bounds every T (uniform_bounds)."""
    qkv, cu = _qkv([5, 40, 3], 4, 64, torch.float32, seed=2)
    out = torch.full((48, 4, 64), float("nan"))
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = fa.varlen_attention(qkv, cu).clone()
        torch.set_num_threads(2)
        assert fa.varlen_attention(qkv, cu, out=out) is out
    finally:
        torch.set_num_threads(before)
    assert torch.equal(out, one)
    assert torch.equal(fa.uniform_bounds(3, 4), torch.tensor([0, 4, 8, 12]))
    qkv2, cu2 = _qkv([16, 16], 2, 32, torch.float32, seed=3)
    assert torch.equal(fa.varlen_attention(qkv2, fa.uniform_bounds(2, 16)), fa.varlen_attention(qkv2, cu2))


@needs_kernel
def test_inputs_it_refuses():
    qkv, cu = _qkv([4, 4], 2, 64, torch.float32)
    assert not fa.usable(qkv[:, :, :1].expand(8, 3, 2, 64))  # not contiguous
    assert not fa.usable(torch.randn(8, 3, 2, 48))  # head_dim 48
    assert not fa.usable(qkv.double())
    assert not fa.usable(qkv, dropout_p=0.1)
    grad = qkv.clone().requires_grad_()
    assert not fa.usable(grad)  # training: SDPA's autograd
    with torch.no_grad():
        assert fa.usable(grad)
    with pytest.raises(RuntimeError, match="cu_seqlens must run from 0 to N"):
        fa.varlen_attention(qkv, torch.tensor([0, 4, 7]))
    with pytest.raises(RuntimeError, match="must not decrease"):
        fa.varlen_attention(qkv, torch.tensor([0, 5, 4, 8]))
    with pytest.raises(RuntimeError, match="out must be"):
        fa.varlen_attention(qkv, cu, out=torch.empty(8, 2, 32))


def _model(d=32, heads=2):
    cfg = bertfam.preset("bert-base", vocab_size=90, hidden_size=d * heads, num_hidden_layers=2,
                         num_attention_heads=heads, intermediate_size=48, max_position_embeddings=80)
    return bertfam.build_model(cfg, seed=0).eval()


def _inputs(B=4, T=70, padded=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 90, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.long)
    if padded:
        mask[1, 50:] = 0
        mask[2, 3:] = 0
    return dict(input_ids=ids, attention_mask=mask)


@needs_kernel
@pytest.mark.parametrize("padded", [True, False])
def test_optimize_for_inference_switches_it_on_and_the_outputs_stay_the_plain_ones(padded, monkeypatch):
    plain = _model()
    fast = optimize_for_inference(copy.deepcopy(plain), fused_attention=True)
    assert all(m.fused_attention for m in fast.modules() if isinstance(m, SelfAttention))
    assert not any(m.fused_attention for m in plain.modules() if isinstance(m, SelfAttention))
    calls = []
    real = fa.varlen_attention
    monkeypatch.setattr(fa, "varlen_attention", lambda *a, **k: calls.append(1) or real(*a, **k))
    kw = _inputs(padded=padded)
    with torch.inference_mode():
        want, got = plain(**kw).last_hidden_state, fast(**kw).last_hidden_state
    assert len(calls) == 2  # once per layer, packed or unpadded alike
    assert (got - want).abs().max().item() < 1e-5
    off = optimize_for_inference(copy.deepcopy(plain), linear="aten", fused_attention=False)
    calls.clear()
    with torch.inference_mode():
        assert torch.equal(off(**kw).last_hidden_state, want)  # torch's cores: the plain forward bit for bit
    assert calls == []


@needs_kernel
def test_never_in_training_nor_with_gradients(monkeypatch):
    model = optimize_for_inference(_model(), fused_attention=True)
    monkeypatch.setattr(fa, "varlen_attention", lambda *a, **k: pytest.fail("fused kernel used with autograd"))
    model.train()
    out = model(**_inputs(padded=False)).last_hidden_state
    out.sum().backward()  # SDPA's gradients
    assert model.backbone.encoder.layers[0].attn.qkv.weight.grad is not None


@needs_kernel
def test_where_it_cannot_run_torch_cores_stay(monkeypatch):
    """No AVX-512 (or a failed build): None leaves it off without a word, True is one ConfigError line."""
    monkeypatch.setattr(fa, "cpu_supports", lambda dtype: False)
    model = optimize_for_inference(_model())
    assert not any(m.fused_attention for m in model.modules() if isinstance(m, SelfAttention))
    with pytest.raises(ConfigError, match="cannot run here: neither AVX-512 nor AVX2"):
        set_fused_attention(model, True)
    monkeypatch.undo()
    monkeypatch.setitem(fa._MODULE, fa.variant(), None)
    monkeypatch.setitem(fa._MODULE, "why", "no C++ compiler found")
    assert not fa.available(torch.float32)
    with pytest.raises(ConfigError, match="no C\\+\\+ compiler found"):
        optimize_for_inference(_model(), fused_attention=True)
    with torch.inference_mode():  # and the model still runs, on torch's cores
        assert optimize_for_inference(_model())(**_inputs()).last_hidden_state.isfinite().all()


@needs_kernel
def test_heads_it_does_not_take_keep_torch_cores():
    model = optimize_for_inference(_model(d=16, heads=4))  # head_dim 16
    assert not any(m.fused_attention for m in model.modules() if isinstance(m, SelfAttention))
    with pytest.raises(ConfigError, match="heads of \\[16\\]"):
        set_fused_attention(model, True)


@needs_bf16
def test_static_int8_layers_attend_through_it_in_bfloat16(monkeypatch):
    from bertfam.modeling.calibration import calibrate
    from bertfam.modeling.int8_static import quantize_static_int8

    plain = _model(d=64)
    batches = [_inputs(seed=s) for s in range(2)]
    static = quantize_static_int8(copy.deepcopy(plain), calibrate(copy.deepcopy(plain), batches))
    optimize_for_inference(static, fused_attention=True)
    dtypes = []
    real = fa.varlen_attention
    monkeypatch.setattr(fa, "varlen_attention", lambda qkv, *a, **k: dtypes.append(qkv.dtype) or real(qkv, *a, **k))
    with torch.inference_mode():
        want = plain(**batches[0]).last_hidden_state
        fused = static(**batches[0]).last_hidden_state
        set_fused_attention(static, False)
        cores = static(**batches[0]).last_hidden_state
    assert dtypes == [torch.bfloat16] * 2
    real_tokens = batches[0]["attention_mask"].bool()
    err = lambda h: (h - want)[real_tokens].abs().mean().item()  # noqa: E731
    assert err(fused) < 0.1 and err(fused) <= 1.1 * err(cores), (err(fused), err(cores))


@needs_kernel
def test_a_padded_batch_run_padded_keeps_torch_cores(monkeypatch):
    """packing="padded" with padding: the mask goes to attention_core.attend (the kernel knows no masks)."""
    model = optimize_for_inference(_model(), fused_attention=True)
    model.packing = "padded"
    monkeypatch.setattr(fa, "varlen_attention", lambda *a, **k: pytest.fail("fused kernel given a masked batch"))
    with torch.inference_mode():
        assert model(**_inputs(padded=True)).last_hidden_state.isfinite().all()


def test_a_killed_builds_lock_is_removed_and_a_live_ones_kept(tmp_path, monkeypatch):
    """torch waits for ever on the lock file of a build that was killed; ours removes one older than
    STALE_LOCK_S before building, and leaves a build in progress alone."""
    import os
    import time

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    d = fa.build_directory()
    assert d.startswith(str(tmp_path)) and os.path.isdir(d)
    assert torch.__version__ in d and fa.build_directory("avx2") != fa.build_directory("avx512")
    lock = os.path.join(d, "lock")
    open(lock, "w").close()
    assert fa.build_directory() == d and os.path.exists(lock)  # a live build's
    old = time.time() - fa.STALE_LOCK_S - 5
    os.utime(lock, (old, old))
    fa.build_directory()
    assert not os.path.exists(lock)


needs_avx2 = pytest.mark.skipif(not {"avx2", "fma"} <= set(fa.cpu_flags()), reason="the AVX2 build needs AVX2 + FMA")


@needs_avx2
@pytest.mark.parametrize("d", [32, 64])
def test_the_avx2_build_matches_the_reference_and_refuses_bfloat16(d):
    """The 8-lane build that AVX2-only CPUs run, built here on purpose (an AVX-512 CPU runs AVX2 code too)."""
    ext = fa._extension("avx2")
    assert ext is not None, fa.why_unavailable()
    qkv, cu = _qkv(LENGTHS, 3, d, torch.float32, seed=4)
    out = torch.empty(qkv.shape[0], 3, d)
    ext.varlen_attention(qkv, cu, 1 / math.sqrt(d), out)
    assert (out.double() - _reference(qkv, cu)).abs().max().item() < 1e-5
    with pytest.raises(RuntimeError, match="needs AVX512_BF16"):
        ext.varlen_attention(qkv.bfloat16(), cu, 0.125, out.bfloat16())



@needs_kernel
def test_by_default_only_where_the_probe_finds_it_faster(monkeypatch):
    """fused_attention=None asks faster_here (a timed probe against torch's attention, once per shape);
    True does not ask."""
    asked = []
    monkeypatch.setattr(fa, "faster_here", lambda h, d, threads=None: asked.append((h, d)) or False)
    attns = lambda m: [a.fused_attention for a in m.modules() if isinstance(a, SelfAttention)]  # noqa: E731
    assert attns(optimize_for_inference(_model(d=32, heads=2))) == [False, False] and asked == [(2, 32)]
    asked.clear()
    assert attns(optimize_for_inference(_model(), fused_attention=True)) == [True, True] and asked == []
    monkeypatch.undo()
    fa._FASTER.pop((2, 32, 1), None)
    before = torch.get_num_threads()
    try:  # the real probe, on one thread: a bool, remembered
        won = fa.faster_here(2, 32, threads=1)
    finally:
        torch.set_num_threads(before)
    assert fa._FASTER[(2, 32, 1)] is won and isinstance(won, bool)



@needs_kernel
def test_a_traced_model_keeps_torch_cores(monkeypatch):
    """The kernel is no torch op, so a trace of an optimized model (jit.trace here; ONNX export and compile
    take the same test) must record torch's attention, and the traced graph must run without the kernel."""
    model = optimize_for_inference(_model(), fused_attention=True).backbone
    monkeypatch.setattr(fa, "varlen_attention", lambda *a, **k: pytest.fail("fused kernel inside a trace"))
    ids = _inputs(padded=False)["input_ids"]

    class Hidden(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            return self.m(input_ids=x).last_hidden_state

    with torch.no_grad():
        traced = torch.jit.trace(Hidden(model), (ids,), check_trace=False)
        assert traced(ids).shape == (4, 70, 64)
