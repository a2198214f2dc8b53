"""The two attention cores compute the same softmax(q kᵀ / √d + mask) v, in every mask form and packed kernel,
and the probe gives "matmul" only the lengths where it is clearly faster, once per process."""
import copy

import pytest
import torch
import torch.nn.functional as F

import bertfam
import bertfam.modeling.attention_core as core_mod
import bertfam.modeling.int8_static as st
from bertfam.errors import ConfigError
from bertfam.modeling import varlen
from bertfam.modeling.attention import extended_mask
from bertfam.modeling.attention_core import CORES, attend, core_of, matmul_up_to
from bertfam.modeling.calibration import calibrate
from bertfam.modeling.int8_static import quantize_static_int8, set_attention_dtype

from .test_varlen import _batch


def _qkv(B=3, h=4, T=9, d=16, dtype=torch.float32, seed=0):
    """q, k, v as the model has them: strided views of one (B, T, 3, h, d) projection output."""
    g = torch.Generator().manual_seed(seed)
    qkv = torch.randn(B, T, 3, h, d, generator=g).to(dtype).permute(2, 0, 3, 1, 4)  # (3, B, h, T, d)
    return qkv[0], qkv[1], qkv[2]


def _masks(B=3, T=9):
    lengths = torch.tensor([T, 4, 1])[:B]
    keep = torch.arange(T)[None] < lengths[:, None]  # (B, T)
    visible = torch.rand(B, T, T, generator=torch.Generator().manual_seed(1)) > 0.3
    visible |= torch.eye(T, dtype=torch.bool)  # every query sees itself (K-BERT's visibility matrices do)
    return {"none": None, "additive keys": extended_mask(keep.long(), torch.float32),
            "bool keys": keep[:, None, None, :], "additive visibility": extended_mask(visible.long(), torch.float32)}


@pytest.mark.parametrize("name", list(_masks()))
def test_matmul_core_equals_sdpa(name):
    q, k, v = _qkv()
    mask = _masks()[name]
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    out = attend(q, k, v, mask, matmul_up_to=9)  # T = 9: the matmul core
    assert out.shape == ref.shape == (3, 4, 9, 16)
    assert torch.allclose(out, ref, atol=1e-5), float((out - ref).abs().max())


def test_matmul_core_in_bf16_is_within_bf16_rounding():
    q, k, v = _qkv(dtype=torch.bfloat16)
    mask = _masks()["additive keys"].to(torch.bfloat16)
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask.float())
    for core in CORES:
        out = attend(q, k, v, mask, matmul_up_to=core_of(core))
        assert out.dtype == torch.bfloat16
        assert float((out.float() - ref).abs().max()) < 0.05, core  # bf16 has 8 mantissa bits


def test_dropout_and_unknown_cores():
    q, k, v = _qkv()
    torch.manual_seed(3)
    ref = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    torch.manual_seed(3)
    assert torch.equal(attend(q, k, v, None, 0.5, matmul_up_to=core_of("matmul")), ref)  # dropout: SDPA
    with pytest.raises(ValueError, match="attention core 'flash' not in sdpa, matmul"):
        core_of("flash")


def test_length_decides_the_core(monkeypatch):
    """Up to matmul_up_to keys the matmul core runs, beyond it SDPA (seen by which kernel is called)."""
    seen = []
    real = F.scaled_dot_product_attention
    monkeypatch.setattr(core_mod.F, "scaled_dot_product_attention", lambda *a, **k: seen.append(1) or real(*a, **k))
    q, k, v = _qkv(T=9)
    attend(q, k, v, matmul_up_to=9)
    assert seen == []
    attend(q, k, v, matmul_up_to=8)
    assert seen == [1]


@pytest.mark.parametrize("name", ["none", "additive keys", "additive visibility"])
def test_chunks_of_whole_sequences_give_the_same_result(name, monkeypatch):
    """Scores over SCORES_BYTES are computed a few sequences at a time (here 1 or 2 of 3), each chunk with its
    rows of the mask (or the whole mask where it broadcasts over the batch)."""
    q, k, v = _qkv()
    mask = _masks()[name]
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    for per_chunk in (1, 2):
        monkeypatch.setattr(core_mod, "SCORES_BYTES", per_chunk * 4 * 9 * 9 * 4)
        assert torch.allclose(attend(q, k, v, mask, matmul_up_to=9), ref, atol=1e-5)
    one = extended_mask(torch.ones(1, 9, dtype=torch.long), torch.float32)  # (1, 1, 1, T): broadcast
    assert torch.allclose(attend(q, k, v, one, matmul_up_to=9), F.scaled_dot_product_attention(q, k, v), atol=1e-5)


def test_scores_buffer_is_reused_and_softmax_runs_in_place():
    """The matmul core keeps one scores buffer per thread (no fresh (B, h, T, T) tensor per call) and runs
    aten's softmax with its output over its input, which must stay exact (a torch upgrade could break it)."""
    q, k, v = _qkv()
    attend(q, k, v, matmul_up_to=9)
    first = core_mod._BUFFERS.scores.data_ptr()
    attend(q, k, v, matmul_up_to=9)
    assert core_mod._BUFFERS.scores.data_ptr() == first
    for dtype in (torch.float32, torch.bfloat16):
        s = torch.randn(2, 3, 40, 70).to(dtype)
        ref = torch.softmax(s, -1)
        assert torch.equal(torch.ops.aten._softmax.out(s, -1, False, out=s), ref)


def test_autograd_goes_through_sdpa():
    q, k, v = (t.detach().requires_grad_() for t in _qkv())
    attend(q, k, v, matmul_up_to=9).sum().backward()  # the matmul core's out= buffers would refuse autograd
    assert q.grad is not None and k.grad is not None


@pytest.mark.parametrize("kernel", ["loop", "pad"])
def test_packed_kernels_take_the_core(kernel):
    g = torch.Generator().manual_seed(0)
    keep = torch.arange(9)[None] < torch.tensor([9, 4, 1])[:, None]
    p = varlen.pack_info(keep, kernel)
    qkv = torch.randn(p.num_tokens, 3, 4, 16, generator=g)  # (N, 3, h, d)
    ref = varlen.attention(qkv, p)
    out = varlen.attention(qkv, p, matmul_up_to=core_of("matmul"))
    assert out.shape == (p.num_tokens, 64)
    assert torch.allclose(out, ref, atol=1e-5)


def test_probe_gives_matmul_the_lengths_it_clearly_wins_and_runs_once(monkeypatch):
    """matmul_up_to is the longest probed length up to which "matmul" beats SDPA by more than MARGIN at every
    length; the probe stops at the first loss and its answer is remembered per (dtype, threads)."""
    calls = []

    def timing(wins):  # wins: matmul's time / SDPA's at each probed length, in probe order
        def best_time(fn):
            calls.append(1)
            n = len(calls) - 1
            return 1.0 if n % 2 == 0 else wins[n // 2]  # CORES order per length: sdpa, then matmul
        return best_time

    monkeypatch.setattr(core_mod, "_CHOSEN", {})
    near = 1.0 - core_mod.MARGIN / 2
    for wins, want, timed in (((0.5, 0.5, 0.5, 0.5), 512, 8), ((0.4, 0.5, 1.2, 0.5), 128, 6),
                              ((near, 0.5, 0.5, 0.5), 0, 2), ((2.0,) * 4, 0, 2)):
        monkeypatch.setattr(core_mod, "_best_time", timing(wins))
        core_mod._CHOSEN.clear()
        calls.clear()
        assert matmul_up_to(torch.bfloat16, threads=1) == want
        assert len(calls) == timed  # it stops at the first length matmul loses
        assert matmul_up_to(torch.bfloat16, threads=1) == want and len(calls) == timed  # remembered
    monkeypatch.setattr(core_mod, "_best_time", lambda fn: (fn(), 0.01)[1])  # the real kernels run in a probe
    core_mod._BUFFERS.scores = None
    assert matmul_up_to(torch.float32, threads=1) == 0  # a tie keeps SDPA
    assert core_mod._BUFFERS.scores is None  # the probe leaves no buffer behind


def _static_model(plain):
    m = copy.deepcopy(plain)
    return quantize_static_int8(m, calibrate(m, [_batch(plain.config, B=8, T=24, seed=s) for s in range(3)]))


@pytest.fixture(scope="module")
def plain():
    cfg = bertfam.preset("bert-base", vocab_size=200, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=128, max_position_embeddings=40)
    return bertfam.build_model(cfg, seed=0).eval()


def test_static_int8_layers_take_the_probed_core(plain, monkeypatch):
    monkeypatch.setattr(st, "matmul_up_to", lambda dtype: 128)

    def up_to(m):
        return {layer.attn.matmul_up_to for layer in m.backbone.encoder.layers}
    m = set_attention_dtype(_static_model(plain), torch.bfloat16)
    assert up_to(m) == {128}
    assert up_to(set_attention_dtype(m, torch.float32)) == {0}
    assert up_to(set_attention_dtype(m, torch.float32, "matmul")) == {core_of("matmul")}
    assert up_to(set_attention_dtype(m, torch.bfloat16, "sdpa")) == {0}
    with pytest.raises(ConfigError, match="attention core 'flash' not in sdpa, matmul"):
        set_attention_dtype(m, torch.bfloat16, "flash")
    assert up_to(plain) == {0}  # float models keep SDPA


def test_static_int8_outputs_agree_across_cores(plain):
    """bf16 attention through either core: the same hidden states up to bf16 rounding, padded and packed."""
    kw = _batch(plain.config, B=6, T=24, seed=9)
    real = kw["attention_mask"].bool()
    m = _static_model(plain)
    outs = {}
    for core in CORES:
        set_attention_dtype(m, torch.bfloat16, core)
        with torch.inference_mode():
            outs[core] = {p: m(**kw, packing=p).last_hidden_state for p in ("padded", "auto")}
    scale = float(outs["sdpa"]["padded"][real].abs().mean())
    for p in ("padded", "auto"):
        d = (outs["matmul"][p] - outs["sdpa"][p])[real].abs()
        assert float(d.mean()) < 0.02 * scale, (p, float(d.mean()), scale)
