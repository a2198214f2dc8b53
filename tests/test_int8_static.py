"""Static int8 (modeling/int8_static.py, modeling/calibration.py, `bertfam quantize --calibrate`): the oneDNN ops'
semantics the modules rely on, accuracy against float measured beside dynamic int8 on the same model, layouts,
padding and batch independence, checkpoints (static round trip, dynamic ones unchanged), the inference-only
rule and the command line.

Hidden size 256 wherever outputs are compared, as in test_int8.py (smaller random layers saturate the int16
pair sums of non-VNNI int8 kernels)."""
import copy
import json
import os

import pytest
import torch
import torch.nn.functional as F

import bertfam
from bertfam import HeadConfig
from bertfam.config import QuantizationConfig
from bertfam.errors import ConfigError
from bertfam.modeling.activations import ACT
from bertfam.modeling.calibration import OBSERVERS, calibrate
from bertfam.modeling.encoder import Layer
from bertfam.modeling.int8 import Int8Linear, is_int8, quantize_int8
from bertfam.modeling.int8_static import (exact_u8s8, fit_weights, native_bf16, pair_peaks, set_attention_dtype, POST_OPS, StaticInt8Layer, StaticInt8Linear, StaticInt8LinearAct,
                                          StaticInt8LinearAdd, is_static_int8, quantize_static_int8, quantize_u8)
from bertfam.modeling.optimize import optimize_for_inference, reuses_buffers

from .conftest import FIXTURES, cli
from .head_checkpoints import save_head_checkpoints
from .test_varlen import _batch

SMALL = dict(vocab_size=300, hidden_size=256, num_hidden_layers=2, num_attention_heads=4, intermediate_size=1024,
             max_position_embeddings=64)
ONEDNN = torch.ops.onednn


def _cfg(family="bert-base", **head):
    kw = dict(SMALL, **({"embedding_size": 128, "num_hidden_groups": 1} if family == "albert-base" else {}))
    return bertfam.preset(family, **kw, head=HeadConfig(**head))


def _calib(cfg):
    return [_batch(cfg, B=8, T=32, seed=s) for s in range(4)]


def _static(plain, observer="minmax", attention=torch.float32):
    """float32 attention unless asked: the kernel tests must not depend on whether this CPU has native bf16
    (the swap's default, set_attention_dtype(None))."""
    m = copy.deepcopy(plain)
    return set_attention_dtype(quantize_static_int8(m, calibrate(m, _calib(plain.config), observer)), attention)


def _hidden(model, kw, packing="auto"):
    with torch.inference_mode():
        return model(**kw, packing=packing).last_hidden_state


def _max_diff(a, b, real):
    return float((a - b)[real].abs().max())


@pytest.fixture(scope="module")
def plain():
    return bertfam.build_model(_cfg(task=None), seed=0).eval()


# ---------------------------------------------------------------- the oneDNN ops, on small tensors
@pytest.fixture(scope="module")
def op():
    """A random int8 linear: x (7, 64), per-row symmetric int8 weights (48, 64), bias; packed. On a CPU
    without VNNI the op adds pairs of u8 x s8 products in int16, which saturates for full-range weights:
    there the weights are the fitted ones the static modules pack (int8_static.exact_u8s8, fit_weights)."""
    g = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(7, 64, generator=g), torch.randn(48, 64, generator=g) * 0.1, torch.randn(48, generator=g)
    ws = w.abs().amax(1) / 127
    qw = torch.round(w / ws[:, None]).clamp(-127, 127).to(torch.int8)
    if not exact_u8s8():
        qw, ws = fit_weights(qw, ws)
    return dict(x=x, b=b, ws=ws, qw=qw, wd=qw.float() * ws[:, None], packed=ONEDNN.qlinear_prepack(qw, None),
                wzp=torch.zeros(48, dtype=torch.long))


def _codes(x, scale, zp, lo=0, hi=255, dtype=torch.uint8):
    return torch.clamp(torch.round(x / scale) + zp, lo, hi).to(dtype)


def _ql(o, qx, s, zp, out_scale=1.0, out_zp=0, dtype=torch.float32, post="none", alg="", wzp=None, ws=None):
    return ONEDNN.qlinear_pointwise(qx, s, zp, o["packed"], o["ws"] if ws is None else ws,
                                    o["wzp"] if wzp is None else wzp, o["b"], out_scale, out_zp, dtype, post, [], alg)


def test_qlinear_input_codes_and_zero_points(op):
    """uint8 input with any zero point and int8 input are both exact: y = (qx - zp) * s @ W^T + b."""
    for dtype, zp, lo, hi in ((torch.uint8, 0, 0, 255), (torch.uint8, 128, 0, 255), (torch.uint8, 77, 0, 255),
                              (torch.int8, 0, -128, 127), (torch.int8, 10, -128, 127)):
        qx = _codes(op["x"], 0.02, zp, lo, hi, dtype)
        ref = (qx.float() - zp) * 0.02 @ op["wd"].t() + op["b"]
        assert float((_ql(op, qx, 0.02, zp) - ref).abs().max()) < 1e-5, (dtype, zp)
    qx = _codes(op["x"], 0.02, 128)
    y = _ql(op, qx, 0.02, 128)
    assert torch.equal(_ql(op, qx.view(1, 7, 64), 0.02, 128), y.view(1, 7, 48))  # any leading shape
    assert _ql(op, qx[:0], 0.02, 128).shape == (0, 48)
    # weight zero points are ignored (symmetric weights only); per-tensor (1,) scales work; float64 refused
    assert torch.equal(_ql(op, qx, 0.02, 128, wzp=torch.ones(48, dtype=torch.long)), y)
    _ql(op, qx, 0.02, 128, ws=op["ws"][:1], wzp=op["wzp"][:1])
    with pytest.raises(RuntimeError, match="Float"):
        _ql(op, qx, 0.02, 128, ws=op["ws"].double())


def test_qlinear_output_dtypes_and_post_ops(op):
    qx = _codes(op["x"], 0.02, 128)
    ref = (qx.float() - 128) * 0.02 @ op["wd"].t() + op["b"]
    with pytest.raises(RuntimeError, match="scale=1 and zero point=0 for fp32 output"):
        _ql(op, qx, 0.02, 128, out_scale=0.5, out_zp=3)
    # output_dtype None: codes in the input's dtype at (out_scale, out_zp), as explicit uint8 / int8 give
    for dtype, want, lo, hi, zp in ((None, torch.uint8, 0, 255, 100), (torch.uint8, torch.uint8, 0, 255, 100),
                                    (torch.int8, torch.int8, -128, 127, 0)):
        y = _ql(op, qx, 0.02, 128, out_scale=0.05, out_zp=zp, dtype=dtype)
        assert y.dtype == want and torch.equal(y, _codes(ref, 0.05, zp, lo, hi, want)), dtype
    assert _ql(op, _codes(op["x"], 0.02, 0, -128, 127, torch.int8), 0.02, 0, 0.05, 0, None).dtype == torch.int8
    for alg in ("none", "tanh"):  # GELU, erf or tanh approximation, as a post-op; fused with uint8 output too
        assert float((_ql(op, qx, 0.02, 128, post="gelu", alg=alg) - F.gelu(ref, approximate=alg)).abs().max()) < 1e-5
        y = _ql(op, qx, 0.02, 128, 0.05, 100, torch.uint8, "gelu", alg)
        assert int((y.int() - _codes(F.gelu(ref, approximate=alg), 0.05, 100).int()).abs().max()) <= 1
    with pytest.raises(RuntimeError, match="unsupported unary post op silu"):
        _ql(op, qx, 0.02, 128, post="silu")  # SiLU is "swish" to oneDNN


def test_qlinear_binary_add_and_sum(op):
    qx = _codes(op["x"], 0.02, 128)
    ref = (qx.float() - 128) * 0.02 @ op["wd"].t() + op["b"]
    other = torch.randn(7, 48)
    for kind in ("add", "sum"):
        o = other.clone()
        y = ONEDNN.qlinear_pointwise.binary(qx, 0.02, 128, op["packed"], op["ws"], op["wzp"], o, op["b"], 1.0, 0,
                                            torch.float32, 1.0, 0, kind, 1.0, "none", [], "")
        assert float((y - (ref + other)).abs().max()) < 1e-5
        # "add": a new tensor; "sum": accumulated into `other`, which it returns
        assert (y.data_ptr() == o.data_ptr()) == (kind == "sum") and torch.equal(o, other) == (kind == "add")


def test_qlinear_rows_do_not_depend_on_each_other(op):
    qx = _codes(torch.randn(37, 64, generator=torch.Generator().manual_seed(1)), 0.02, 128)
    full = _ql(op, qx, 0.02, 128)
    rows = torch.cat([_ql(op, qx[i:i + 1], 0.02, 128) for i in range(37)])
    # equal up to float summation order: oneDNN picks another kernel for 1 row than for 37 on some CPUs
    # (AMX), while a batch-wide quantization step would move outputs by whole quantization steps (~1e-2)
    assert float((full - rows).abs().max()) <= 1e-5 * float(full.abs().max())


def test_quantize_u8_is_round_half_even_and_clamp():
    x = torch.tensor([-100.0, -0.05, -0.025, 0.0, 0.025, 0.075, 1.0, 100.0]).repeat(3, 1)  # (3, 8)
    q = quantize_u8(x, 0.05, 128)
    assert q.dtype == torch.uint8 and q.shape == x.shape and not q.is_quantized
    assert torch.equal(q, _codes(x, 0.05, 128))  # torch.round: half to even, as the kernel's quantizer
    assert quantize_u8(x[:, ::2], 0.05, 128).shape == (3, 4)


# ---------------------------------------------------------------- the modules
def test_static_modules_against_their_float_reference():
    torch.manual_seed(0)
    lin = torch.nn.Linear(256, 96)
    torch.nn.init.normal_(lin.weight, 0.0, 0.02)
    q = Int8Linear.from_linear(lin)
    x, res = torch.randn(2, 5, 256), torch.randn(2, 5, 96)
    s, zp = 8.0 / 255, 128
    xq = (quantize_u8(x, s, zp).float() - zp) * s  # x as its uint8 codes stand for it
    # the int8 weights (fitted where the CPU lacks VNNI: exact_u8s8), the quantized input, float arithmetic
    w, ws = (q.weight_int8, q.weight_scale) if exact_u8s8() else fit_weights(q.weight_int8, q.weight_scale)
    ref = xq @ (w.float() * ws[:, None]).t() + q.bias
    with torch.inference_mode():
        plain, add, add_ = (c.from_int8(q).eval() for c in (StaticInt8Linear, StaticInt8LinearAdd, StaticInt8LinearAdd))
        add_.inplace = True
        for m in (plain, add, add_):
            m.set_input_qparams(s, zp)
        assert plain.weight_int8 is q.weight_int8  # the same tensors: one checkpoint serves both methods
        assert float((plain(x) - ref).abs().max()) < 1e-5
        assert torch.equal(plain(x), plain(quantize_u8(x, s, zp)))  # uint8 input: codes at its own scale
        assert torch.equal(add(x, res), plain(x) + res)
        r = res.clone()
        assert torch.equal(add_(x, r), plain(x) + res) and torch.equal(r, plain(x) + res)  # inplace: into res
        assert plain(x[:0]).shape == (0, 5, 96)
    assert set(plain.state_dict()) == {"weight_int8", "weight_scale", "bias", "input_scale", "input_zero_point"}


def test_fit_weights_rescales_only_the_channels_with_a_large_pair():
    """vpmaddubsw adds the products of weights (2j, 2j+1) in int16: a channel whose same-sign pair sums to
    more than 128 is divided by peak / 127 (scale times that), the others stay as they are."""
    w = torch.tensor([[127, -127, 1, 2, 3],  # opposite signs: 127 at most, kept
                      [0, 64, -64, 63, -1],  # 64 and -64 are in different pairs: kept
                      [127, 127, 127, 127, 127],  # peak 254: halved, the odd last one pairs with a zero
                      [65, 64, 0, 0, -9],  # peak 129: r = 129 / 127
                      [1, 127, 127, -1, 0]], dtype=torch.int8)  # the two 127s are in different pairs: kept
    assert pair_peaks(w).tolist() == [127, 64, 254, 129, 128]
    q, s = fit_weights(w, torch.ones(5))
    kept = [0, 1, 4]
    assert q[kept].tolist() == w[kept].tolist() and s[kept].tolist() == [1.0, 1.0, 1.0]
    assert q[2].tolist() == [64] * 5 and s[2] == 2.0  # 127 / 2 rounds half to even: 64
    assert q[3].tolist() == [64, 63, 0, 0, -9] and abs(float(s[3]) - 129 / 127) < 1e-6
    assert pair_peaks(q).max() <= 128
    g = torch.Generator().manual_seed(0)
    for k in (64, 65, 768):  # full-range random weights: every pair fits, each channel within r <= 2
        w = torch.randint(-127, 128, (96, k), generator=g, dtype=torch.int8)
        q, s = fit_weights(w, torch.full((96,), 0.5))
        assert pair_peaks(q).max() <= 128 and float(s.max()) <= 1.0 and float(s.min()) >= 0.5
        assert float((q.float() * s[:, None] - w.float() * 0.5).abs().max()) <= float(s.max()) / 2 + 1e-6


@pytest.mark.parametrize("k", [64, 65, 768])
def test_fitted_weights_never_saturate_the_kernel(k):
    """The fitted weights multiply exactly on this CPU's kernel, whatever the codes (all 255: the worst case),
    the row count and K; on a CPU without VNNI the raw full-range weights do not (what fitting is for)."""
    g = torch.Generator().manual_seed(k)
    w = torch.randint(-127, 128, (48, k), generator=g, dtype=torch.int8)
    q, s = fit_weights(w, torch.ones(48))
    ones, zp = torch.ones(48), torch.zeros(48, dtype=torch.long)

    def err(wq, x):
        y = ONEDNN.qlinear_pointwise(x, 1.0, 0, ONEDNN.qlinear_prepack(wq, None), ones, zp, None, 1.0, 0,
                                     torch.float32, "none", [], "")
        return float((y.double() - x.double() @ wq.double().t()).abs().max())

    for m in (1, 7, 256):
        for x in (torch.full((m, k), 255, dtype=torch.uint8),
                  torch.randint(0, 256, (m, k), generator=g, dtype=torch.uint8)):
            assert err(q, x) < 1e-2 * k, (m, k)
    if not exact_u8s8():
        assert err(w, torch.full((7, k), 255, dtype=torch.uint8)) > 1000


def test_without_vnni_the_kernel_packs_fitted_weights_and_stays_exact(monkeypatch):
    """A CPU without VNNI (AVX2) saturates full-range u8 x s8 pairs (16.8 off on random weights, Zen 3);
    there the static kernel packs the fitted weights: exact on every CPU, and closer to the full weights'
    result than halving every weight (the fix before) was."""
    from bertfam.modeling import int8_static

    torch.manual_seed(0)
    lin = torch.nn.Linear(256, 96)
    torch.nn.init.normal_(lin.weight, 0.0, 0.02)
    q = Int8Linear.from_linear(lin)
    x, s, zp = torch.randn(3, 256) * 3, 8.0 / 255, 128
    xq = (quantize_u8(x, s, zp).float() - zp) * s
    wf, sf = fit_weights(q.weight_int8, q.weight_scale)
    with torch.inference_mode():
        monkeypatch.setattr(int8_static, "exact_u8s8", lambda: False)
        m = StaticInt8Linear.from_int8(q).eval()
        m.set_input_qparams(s, zp)
        y = m(x)
        assert m.weight_int8 is q.weight_int8 and int(m.kernel().packed.numel()) > 0  # the stored weights stay 8-bit
        assert torch.equal(m.kernel().w_scale, sf)
        assert float((y - (xq @ (wf.float() * sf[:, None]).t() + q.bias)).abs().max()) < 1e-5
        full = xq @ q.dequantize().t() + q.bias
        halved = xq @ (torch.round(q.weight_int8.float() / 2) * 2 * q.weight_scale[:, None]).t() + q.bias
        assert 0 < float((y - full).norm()) < 0.8 * float((halved - full).norm())


@pytest.mark.parametrize("act", sorted(ACT))
def test_every_activation_has_its_fused_post_op(act):
    assert act in POST_OPS
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 32)
    m = StaticInt8LinearAct.from_int8(Int8Linear.from_linear(lin)).eval()
    m.act = act
    m.set_input_qparams(6.0 / 255, 128)
    x = torch.randn(9, 64)
    with torch.inference_mode():
        ref = ACT[act](StaticInt8Linear.forward(m, x))  # the same int8 product, activation in float
        y = m(x, (0.02, 40))
    assert y.dtype == torch.uint8 and int((y.int() - _codes(ref, 0.02, 40).int()).abs().max()) <= 1, act


# ---------------------------------------------------------------- accuracy, layouts, padding, batches
def test_static_is_as_close_to_float_as_dynamic(plain):
    """The tolerance is dynamic int8's own error on the same model and held-out batch (measured here: about
    1.9e-2 max |diff| for either, on hidden states of mean |x| ~0.8), with 25 % headroom."""
    kw = _batch(plain.config, B=6, T=24, seed=99)
    real = kw["attention_mask"].bool()
    ref = _hidden(plain, kw)
    dynamic = _max_diff(_hidden(quantize_int8(copy.deepcopy(plain)), kw), ref, real)
    errors = {}
    for observer in OBSERVERS:
        m = _static(plain, observer)
        errors[observer] = _max_diff(_hidden(m, kw), ref, real)
    print(f"max |hidden - float| on real tokens: dynamic {dynamic:.3e}, static {errors}")
    assert 0 < errors["minmax"] <= 1.25 * dynamic
    assert errors["minmax"] < errors["percentile"]  # the default: clipping outliers costs more than it gains


def test_layouts_agree_and_other_families(plain):
    m = _static(plain)
    assert all(type(layer) is StaticInt8Layer for layer in m.backbone.encoder.layers)
    kw = _batch(plain.config, B=5, T=20, seed=7)
    real = kw["attention_mask"].bool()
    assert _max_diff(_hidden(m, kw, "padded"), _hidden(m, kw, "auto"), real) < 1e-5
    albert = bertfam.build_model(_cfg("albert-base", task="mlm"), seed=0).eval()
    q = _static(albert)
    with torch.inference_mode():
        ref, out = albert(**kw).logits, q(**kw).logits
    assert float((out - ref)[real].norm() / ref[real].norm()) < 0.05


def test_bf16_attention_costs_no_accuracy_and_is_chosen_by_the_cpu(plain, monkeypatch):
    """Attention in bf16 inside static int8 layers: q, k, v come out of qkv as bf16, the context is quantized
    from it; on hidden states its error against float is within 10 % of float32 attention's, in both
    layouts (the 8-bit activations around it dominate). The swap picks bf16 only where the CPU has it."""
    kw = _batch(plain.config, B=6, T=24, seed=99)
    real = kw["attention_mask"].bool()
    ref = _hidden(plain, kw)
    f32, bf16 = _static(plain), _static(plain, attention=torch.bfloat16)
    assert bf16.backbone.encoder.layers[0].attn.qkv.out_dtype == torch.bfloat16
    for packing in ("padded", "auto"):
        e32, e16 = (float((_hidden(m, kw, packing) - ref)[real].norm() / ref[real].norm()) for m in (f32, bf16))
        assert e16 <= 1.1 * e32 + 1e-3, (packing, e16, e32)
    import bertfam.modeling.int8_static as st
    for has, want in ((False, torch.float32), (True, torch.bfloat16)):
        monkeypatch.setattr(st, "native_bf16", lambda has=has: has)
        m = quantize_static_int8(copy.deepcopy(plain), calibrate(plain, _calib(plain.config)))
        assert {layer.attn.qkv.out_dtype for layer in m.backbone.encoder.layers} == {want}
    with pytest.raises(ConfigError, match="float32 or bfloat16"):
        set_attention_dtype(f32, torch.float16)
    assert isinstance(native_bf16(), bool)


def test_calibration_sees_real_tokens_only(plain):
    cfg = plain.config
    b = _batch(cfg, B=4, T=20, seed=5)
    longer = {k: F.pad(v, (0, 12), value=cfg.pad_token_id if k == "input_ids" else 0) for k, v in b.items()}
    a = calibrate(plain, [b])
    assert len(a) == 4 * cfg.num_hidden_layers
    plain.packing = "padded"  # the padded layout: (B, T, K) inputs, cut to the real tokens
    try:
        padded = calibrate(plain, [longer])
    finally:
        plain.packing = "auto"
    for other in (calibrate(plain, [longer]), padded):
        assert a.keys() == other.keys()
        for n in a:
            assert abs(a[n][0] - other[n][0]) <= 1e-5 * a[n][0] and a[n][1] == other[n][1], n
    with pytest.raises(ConfigError, match="observer 'median' not in minmax, percentile, mse"):
        calibrate(plain, [b], "median")
    with pytest.raises(ConfigError, match="saw no input"):
        calibrate(optimize_for_inference(copy.deepcopy(plain), linear="aten"), [b])  # layers bypass the modules
    with pytest.raises(ConfigError, match="float nn.Linear"):
        calibrate(quantize_int8(copy.deepcopy(plain)), [b])


def test_a_rows_output_does_not_depend_on_the_rest_of_its_batch(plain):
    """Static: every scale is fixed, so a sequence's output is the same alone or in any batch, padded or
    not. Dynamic int8 shares one activation range across the batch: there it moves."""
    cfg = plain.config
    kw = _batch(cfg, B=6, T=24, seed=11)
    n = int(kw["attention_mask"][2].sum())
    alone = {k: v[2:3, :n] for k, v in kw.items()}
    static, dynamic = _static(plain), quantize_int8(copy.deepcopy(plain))
    for packing in ("auto", "padded"):
        s = float((_hidden(static, kw, packing)[2, :n] - _hidden(static, alone, packing)[0]).abs().max())
        d = float((_hidden(dynamic, kw, packing)[2, :n] - _hidden(dynamic, alone, packing)[0]).abs().max())
        assert s < 1e-5 and d > 1e-4, (packing, s, d)


# ---------------------------------------------------------------- swap rules
def test_inference_only_cpu_only_and_uncalibrated(plain):
    m = _static(plain)
    kw = _batch(plain.config, B=2, T=8)
    out = m(**kw)  # autograd on: runs, nothing requires a gradient
    assert not out.last_hidden_state.requires_grad and is_int8(m) and is_static_int8(m)
    m.train()
    with pytest.raises(bertfam.UnsupportedError, match="inference only .*model.eval") as e:
        m(**kw)
    assert "\n" not in str(e.value)
    m.eval()
    emb = torch.ones(2, 8, 256, requires_grad=True)
    with pytest.raises(bertfam.UnsupportedError, match="inference only"):
        m(inputs_embeds=emb, attention_mask=kw["attention_mask"])
    raw = quantize_static_int8(copy.deepcopy(plain))  # no calibration given, nothing loaded
    with pytest.raises(ConfigError, match="no calibrated input scale"):
        raw(**kw)
    with pytest.raises(ConfigError, match="modules lack attn.out"):
        quantize_static_int8(copy.deepcopy(plain), None, ["attn.qkv", "ffn_in", "ffn_out"])


def test_optimize_for_inference_keeps_the_static_layers(plain):
    m = _static(plain)
    kw = _batch(plain.config, B=4, T=16, seed=2)
    before = _hidden(m, kw)
    assert optimize_for_inference(m) is m and reuses_buffers(m)
    assert all(type(layer) is StaticInt8Layer for layer in m.backbone.encoder.layers)
    assert torch.equal(_hidden(m, kw), before)
    optimize_for_inference(m, int8=True)  # the dynamic swap over a static model: the record stays static
    assert m.config.quantization.method == "static-int8"
    with pytest.raises(ValueError, match="int8 and compile"):
        optimize_for_inference(m, compile=True)
    # a model already buffer-reusing becomes static layers all the same (only they can call the modules)
    fast = optimize_for_inference(copy.deepcopy(plain), linear="aten")
    set_attention_dtype(quantize_static_int8(fast, calibrate(plain, _calib(plain.config))), torch.float32)
    assert all(type(layer) is StaticInt8Layer for layer in fast.backbone.encoder.layers)
    assert torch.equal(_hidden(fast, kw), before)
    twin = copy.deepcopy(m)  # the packed cache is dropped, rebuilt on first use
    assert torch.equal(_hidden(twin, kw), before)


def test_optimize_for_inference_keeps_one_copy_of_the_weights_and_gives_them_back(plain, tmp_path, monkeypatch):
    """optimize_for_inference releases each static projection's raw int8 buffer (the packed kernel holds the
    same weights where the CPU's u8 x s8 products are exact: forced here, so that any CPU runs this): outputs
    unchanged; the weights come back exactly from the packed tensor for state_dict, saving, pickling,
    .weight_int8 and .to(); a load_state_dict, new weights or new qparams put them back first."""
    import bertfam.modeling.int8_static as S

    monkeypatch.setattr(S, "exact_u8s8", lambda: True)
    m = _static(bertfam.build_model(_cfg(task="span"), seed=0).eval())
    raw = {k: v.clone() for k, v in m.state_dict().items()}
    counts = m.num_parameters()
    kw = _batch(m.config, B=4, T=16, seed=2)
    with torch.inference_mode():
        before = m(**kw).start_logits
    shared = m.backbone.encoder.layers[0].attn.qkv.weight_scale
    optimize_for_inference(m)
    lins = [x for x in m.modules() if isinstance(x, StaticInt8Linear)]
    assert len(lins) == 8 and all(x._released and x._buffers["weight_int8"].is_meta for x in lins)
    assert m.backbone.encoder.layers[0].attn.qkv.weight_scale is not shared  # its own memory, not the old
    assert m.num_parameters() == counts
    with torch.inference_mode():
        assert torch.equal(m(**kw).start_logits, before)
    sd = m.state_dict()
    assert sd.keys() == raw.keys() and all(torch.equal(sd[k], raw[k]) for k in raw)
    qkv = m.backbone.encoder.layers[1].attn.qkv
    assert torch.equal(qkv.weight_int8, raw["backbone.encoder.layers.1.attn.qkv.weight_int8"])
    m.save_pretrained(str(tmp_path / "s"))
    back = set_attention_dtype(bertfam.from_pretrained(str(tmp_path / "s")), torch.float32)
    with torch.inference_mode():
        assert torch.equal(back(**kw).start_logits, before)
    twin = copy.deepcopy(m)
    assert not any(x._released for x in twin.modules() if isinstance(x, StaticInt8Linear))
    with torch.inference_mode():
        assert torch.equal(twin(**kw).start_logits, before)
    m.load_state_dict(raw)  # loads into the buffer again, packs anew on first use
    assert not qkv._released and torch.equal(qkv._buffers["weight_int8"], raw["backbone.encoder.layers.1.attn.qkv.weight_int8"])
    optimize_for_inference(m)
    assert qkv._released
    zero = torch.zeros_like(raw["backbone.encoder.layers.1.attn.qkv.weight_int8"])
    qkv.weight_int8 = zero  # new weights: they are the buffer, the old pack is dropped
    assert not qkv._released and qkv._packed is None and torch.equal(qkv.weight_int8, zero)
    out = m.backbone.encoder.layers[1].attn.out
    out.set_input_qparams(*out.input_qparams())
    assert not out._released and torch.equal(out.weight_int8, raw["backbone.encoder.layers.1.attn.out.weight_int8"])
    ffn = m.backbone.encoder.layers[0].ffn_in
    m.to(torch.device("cpu"))
    assert not ffn._released and torch.equal(ffn.weight_int8, raw["backbone.encoder.layers.0.ffn_in.weight_int8"])


def test_without_exact_products_the_raw_weights_stay(plain, monkeypatch):
    """Where the kernel packs fitted weights (no VNNI), the packed tensor does not hold the checkpoint's:
    nothing is released."""
    import bertfam.modeling.int8_static as S

    monkeypatch.setattr(S, "exact_u8s8", lambda: False)
    m = optimize_for_inference(_static(plain))
    assert S.release_weights(m) == 0
    assert not any(x._released or x._buffers["weight_int8"].is_meta for x in m.modules()
                   if isinstance(x, StaticInt8Linear))


# ---------------------------------------------------------------- checkpoints
def test_static_checkpoint_round_trip(plain, tmp_path):
    m = _static(bertfam.build_model(_cfg(task="span"), seed=0).eval())
    m.save_pretrained(str(tmp_path / "s"))
    cfg = json.load(open(tmp_path / "s" / "config.json"))
    assert cfg["quantization"]["method"] == "static-int8"
    back = set_attention_dtype(bertfam.from_pretrained(str(tmp_path / "s")), torch.float32)  # as m's
    assert type(back.backbone.encoder.layers[0]) is StaticInt8Layer
    assert type(back.backbone.encoder.layers[0].ffn_in) is StaticInt8LinearAct
    assert back.backbone.encoder.layers[1].ffn_out.inplace and not back.backbone.encoder.layers[1].attn.out.inplace
    kw = _batch(back.config, B=4, T=16, seed=1)
    with torch.inference_mode():
        for packing in ("auto", "padded"):
            a, b = m(**kw, packing=packing), back(**kw, packing=packing)
            assert torch.equal(a.start_logits, b.start_logits) and torch.equal(a.last_hidden_state, b.last_hidden_state)
    trainable = bertfam.from_pretrained(str(tmp_path / "s"), dequantize=True)  # the training commands' load
    assert not is_int8(trainable) and trainable.config.quantization is None
    assert all(type(layer) is Layer for layer in trainable.backbone.encoder.layers)
    assert all(p.requires_grad for p in trainable.parameters())
    trainable.train()(**kw).last_hidden_state.sum().backward()


def test_dynamic_checkpoints_load_as_before(plain, tmp_path):
    dyn = quantize_int8(copy.deepcopy(plain))
    dyn.save_pretrained(str(tmp_path / "d"))
    cfg = json.load(open(tmp_path / "d" / "config.json"))
    assert cfg["quantization"] == {"method": "dynamic-int8", "weights": "per-channel symmetric",
                                   "modules": ["attn.qkv", "attn.out", "ffn_in", "ffn_out", "embeddings.word"]}
    back = bertfam.from_pretrained(str(tmp_path / "d"))
    assert not is_static_int8(back) and type(back.backbone.encoder.layers[0]) is Layer
    assert type(back.backbone.encoder.layers[0].attn.qkv) is Int8Linear
    assert not any("input_scale" in k for k in back.state_dict())
    kw = _batch(plain.config, B=3, T=12, seed=4)
    assert torch.equal(_hidden(dyn, kw), _hidden(back, kw))
    with pytest.raises(ConfigError, match="method must be 'dynamic-int8' or 'static-int8'"):
        QuantizationConfig(method="int4")
    with pytest.raises(ConfigError, match="all of attn.qkv, attn.out, ffn_in, ffn_out for static-int8"):
        QuantizationConfig(method="static-int8", modules=["embeddings.word"])


# ---------------------------------------------------------------- command line
@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    """Tiny (hidden 64) checkpoints with the Chinese vocabulary: the command's plumbing, not accuracy."""
    root = tmp_path_factory.mktemp("int8s")
    return {"root": root, **save_head_checkpoints(root, 64)}


def test_quantize_calibrate_command(dirs, tmp_path, capsys):
    texts = tmp_path / "calib.txt"
    texts.write_text("今天天气很好\n\n这部电影很好看\t我也觉得\n北京是中国的首都\n", encoding="utf-8")
    rc, out, err = cli(capsys, "quantize", dirs["cls"], tmp_path / "q", "--calibrate", texts,
                       "--calibration-batches", "2")
    assert rc == 0 and out.count("\n") == 1 and "static int8 calibrated on 3 inputs" in out, err
    info = json.load(open(tmp_path / "q" / "training_info.json"))
    assert info["calibrated_on"]["inputs"] == 3 and info["calibrated_on"]["observer"] == "minmax"
    rc, out, _ = cli(capsys, "info", tmp_path / "q")
    assert rc == 0 and "weights: int8 (static-int8" in out and "calibrated once" in out
    m = bertfam.from_pretrained(str(tmp_path / "q"))
    assert is_static_int8(m) and float(m.backbone.encoder.layers[0].attn.qkv.input_scale) > 0
    mrc = os.path.join(FIXTURES, "mrc", "cmrc2018_trial_cut.json")
    rc, out, err = cli(capsys, "quantize", dirs["span"], tmp_path / "m", "--calibrate", mrc)
    assert rc == 0 and "calibrated on 6 inputs" in out, err
    jl = tmp_path / "c.jsonl"
    jl.write_text('{"text_a": "你好", "text_b": "世界"}\n{"question": "谁?", "context": "我是谁"}\n', encoding="utf-8")
    rc, out, err = cli(capsys, "quantize", dirs["cls"], tmp_path / "j", "--calibrate", jl)
    assert rc == 0 and "calibrated on 2 inputs" in out, err


def test_quantize_calibrate_bad_files_are_one_line(dirs, tmp_path, capsys):
    bad_tabs = tmp_path / "tabs.txt"
    bad_tabs.write_text("一\n二\t三\t四\n", encoding="utf-8")
    bad_utf8 = tmp_path / "latin.txt"
    bad_utf8.write_bytes("好\n".encode() + b"caf\xe9\n")
    bad_json = tmp_path / "bad.jsonl"
    bad_json.write_text('{"text": "好"}\n{"text": \n', encoding="utf-8")
    no_text = tmp_path / "none.jsonl"
    no_text.write_text('{"label": 1}\n', encoding="utf-8")
    bad_mrc = tmp_path / "bad.json"
    bad_mrc.write_text('{"data": [\n  {"paragraphs": [}\n]}\n', encoding="utf-8")
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    cases = {bad_tabs: f"{bad_tabs}:2: 3 tab-separated fields", bad_utf8: f"{bad_utf8}:2: not UTF-8",
             bad_json: f"{bad_json}:2: not JSON", no_text: f"{no_text}:1: expected an object",
             bad_mrc: f"{bad_mrc}: line 2 column", empty: f"{empty}: no input to calibrate on",
             tmp_path / "missing.txt": "missing.txt: file not found"}
    for path, msg in cases.items():
        rc, out, err = cli(capsys, "quantize", dirs["cls"], tmp_path / "out", "--calibrate", path)
        assert rc == 2 and err.startswith("bertfam: error:") and err.count("\n") == 1 and msg in err, (path, err)
    assert not (tmp_path / "out").exists()
    good = tmp_path / "good.txt"
    good.write_text("好\n", encoding="utf-8")
    for args, msg in ((["--calibration-batches", "2"], "--calibration-batches is for --calibrate"),
                      (["--calibrate", good, "--modules", "attn.qkv,ffn_in"], "--modules lacks attn.out, ffn_out")):
        rc, _, err = cli(capsys, "quantize", dirs["cls"], tmp_path / "out", *args)
        assert rc == 2 and err.count("\n") == 1 and msg in err, err
