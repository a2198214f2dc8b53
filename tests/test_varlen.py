"""The unpadded (varlen) path gives the padded path's numbers: every family, every head, losses, gradients,
a few training steps; it is the default where exact, and the padded path runs where it must."""
import pytest
import torch

import bertfam
from bertfam import HeadConfig
from bertfam.modeling import varlen
from bertfam.modeling.model import IGNORE

TOL = 1e-5
SMALL = dict(vocab_size=90, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
             max_position_embeddings=40)
FAMILY_CFGS = {
    "bert": lambda: bertfam.preset("bert-base", **SMALL),
    "roberta": lambda: bertfam.preset("roberta-base", **dict(SMALL, max_position_embeddings=42)),
    "albert": lambda: bertfam.preset("albert-base", **dict(SMALL, num_hidden_layers=4), num_hidden_groups=2,
                                     inner_group_num=2, embedding_size=16),
    "ernie": lambda: bertfam.preset("ernie-base", **SMALL),
}
HEADS = [dict(task=None), dict(task="mlm"), dict(task="pretraining", pair_objective="nsp"),
         dict(task="classification", num_labels=3), dict(task="classification", num_labels=3,
                                                         classifier_pooling="cls_dense"),
         dict(task="classification", num_labels=3, classifier_pooling="mean"),
         dict(task="regression", num_labels=1), dict(task="token", num_labels=5), dict(task="span")]


def _batch(cfg, B=5, T=17, seed=0):
    """Random ids and a right-padded mask with mixed lengths: one full row, one of length 1."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, T + 1, (B,), generator=g)
    lengths[0], lengths[-1] = T, 1
    mask = (torch.arange(T)[None] < lengths[:, None]).long()  # (B, T)
    ids = torch.randint(5, cfg.vocab_size, (B, T), generator=g).masked_fill(mask == 0, cfg.pad_token_id)
    kw = dict(input_ids=ids, attention_mask=mask)
    if cfg.type_vocab_size > 1:
        kw["token_type_ids"] = (torch.arange(T)[None] >= lengths[:, None] // 2).long() * mask
    if cfg.use_task_id:
        kw["task_type_ids"] = torch.ones_like(ids)
    return kw


def _labels(task, cfg, kw, g):
    B, T = kw["input_ids"].shape
    real = kw["attention_mask"].bool()
    if task in ("mlm", "pretraining"):
        chosen = (torch.rand(B, T, generator=g) < 0.3) & real
        chosen[0, 1] = True
        out = dict(labels=torch.randint(5, cfg.vocab_size, (B, T), generator=g).masked_fill(~chosen, IGNORE))
        if task == "pretraining":
            out["pair_labels"] = torch.randint(0, 2, (B,), generator=g)
        return out
    if task == "classification":
        return dict(labels=torch.randint(0, 3, (B,), generator=g))
    if task == "regression":
        return dict(labels=torch.rand(B, generator=g))
    if task == "token":
        return dict(labels=torch.randint(0, 5, (B, T), generator=g).masked_fill(~real, IGNORE))
    if task == "span":
        return dict(start_positions=torch.randint(0, 3, (B,), generator=g), end_positions=torch.full((B,), 2))
    return {}


def _max_diff(a, b, real):
    """Largest difference over every output field, comparing per-token tensors on real tokens only."""
    diffs = {}
    for name in ("last_hidden_state", "pooler_output", "logits", "pair_logits", "start_logits", "end_logits",
                 "answerable_logits", "loss"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is None:
            continue
        assert x.shape == y.shape, (name, x.shape, y.shape)
        d = x - y
        if d.dim() >= 2 and d.shape[:2] == real.shape:
            d = d[real]
        diffs[name] = float(d.abs().max())
    return diffs


@pytest.mark.parametrize("family", list(FAMILY_CFGS))
def test_every_head_unpadded_equals_padded(family):
    base = FAMILY_CFGS[family]()
    g = torch.Generator().manual_seed(1)
    for head in HEADS:
        cfg = base.replace(head=HeadConfig(**head))
        model = bertfam.build_model(cfg, seed=0).eval()
        kw = _batch(cfg)
        real = kw["attention_mask"].bool()
        with torch.no_grad():
            for extra in ({}, _labels(cfg.head.task, cfg, kw, g)):
                fast, slow = model(**kw, **extra), model(**kw, **extra, packing="padded")
                diffs = _max_diff(fast, slow, real)
                assert diffs and max(diffs.values()) <= TOL, (head, extra.keys(), diffs)
            # the default really is the unpadded path: padding positions hold zeros there, not in the padded one
            assert fast.last_hidden_state[~real].abs().max() == 0 or "start_positions" in extra
            assert slow.last_hidden_state[~real].abs().max() > 0


def test_mlm_over_masked_positions_only(tiny_cfg):
    cfg = tiny_cfg.replace(head=HeadConfig(task="mlm"))
    model = bertfam.build_model(cfg, seed=0).eval()
    kw = _batch(cfg, B=6, T=20, seed=3)
    labels = _labels("mlm", cfg, kw, torch.Generator().manual_seed(4))["labels"]
    sel = labels != IGNORE
    with torch.no_grad():
        fast = model(**kw, labels=labels, masked_positions=sel)
        slow = model(**kw, labels=labels, masked_positions=sel, packing="padded")
        full = model(**kw, labels=labels)
    assert fast.logits.shape == (int(sel.sum()), cfg.vocab_size)
    assert (fast.logits - slow.logits).abs().max() <= TOL
    assert abs(float(fast.loss - slow.loss)) <= TOL and abs(float(fast.loss - full.loss)) <= TOL
    assert (fast.logits - full.logits[sel]).abs().max() <= TOL


def test_gradients_match(tiny_cfg):
    cfg = tiny_cfg.replace(head=HeadConfig(task="token", num_labels=4), hidden_dropout_prob=0.0,
                           attention_probs_dropout_prob=0.0)
    kw = _batch(cfg, B=4, T=15, seed=5)
    labels = torch.randint(0, 4, kw["input_ids"].shape).masked_fill(kw["attention_mask"] == 0, IGNORE)
    grads = []
    for packing in (None, "padded"):
        model = bertfam.build_model(cfg, seed=0).train()
        model(**kw, labels=labels, packing=packing).loss.backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) > 10
    worst = max(float((grads[0][n] - grads[1][n]).abs().max()) for n in grads[0])
    assert worst <= TOL, worst


def test_training_loss_trajectory_matches():
    """Six AdamW steps of MLM training (3 batches, twice) from the same start: the same losses in both layouts."""
    cfg = bertfam.preset("bert-base", **SMALL, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                         head=HeadConfig(task="mlm"))
    batches = []
    g = torch.Generator().manual_seed(7)
    for step in range(3):
        kw = _batch(cfg, B=6, T=19, seed=10 + step)
        kw.update(_labels("mlm", cfg, kw, g))
        batches.append(kw)
    batches = batches * 2
    curves = []
    for packing in (None, "padded"):
        model = bertfam.build_model(cfg, seed=0).train()
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        losses = []
        for kw in batches:
            loss = model(**kw, packing=packing).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
        curves.append(losses)
    assert curves[0][3] < curves[0][0]  # it trains: the first batch's loss fell
    for a, b in zip(*curves):
        assert abs(a - b) <= 1e-4 * max(1.0, abs(b)), curves


def test_padded_path_where_needed(tiny_cfg):
    model = bertfam.build_model(tiny_cfg, seed=0).eval()
    kw = _batch(tiny_cfg, B=3, T=9, seed=2)
    ids, mask = kw["input_ids"], kw["attention_mask"]
    bb = model.backbone
    with torch.no_grad():
        # (B, T, T) visibility matrix: padded path, same outputs as forcing it
        vis = mask[:, None, :] * mask[:, :, None]
        vis[:, 0, 1] = 0
        assert bb.encode(ids, vis).plan is None
        # attentions or hidden states requested: padded path (exact values at every position)
        assert bb.encode(ids, mask, output_attentions=True).plan is None
        assert bb.encode(ids, mask, output_hidden_states=True).plan is None
        # left padding (first position is padding): padded path
        left = mask.flip(1)
        assert bb.encode(ids.flip(1), left).plan is None
        # forced off, per call and per model
        assert bb.encode(ids, mask, packing="padded").plan is None
        assert bb.encode(ids, mask).plan is not None
        bb.packing = "padded"
        assert bb.encode(ids, mask).plan is None
        bb.packing = "auto"
        # no padding at all: the mask is dropped (same numbers as no mask)
        full = torch.ones_like(mask)
        enc = bb.encode(ids, full)
        assert enc.plan is None and torch.equal(enc.states, bb(ids).last_hidden_state)


def test_targets_on_padding_fall_back_exactly(tiny_cfg):
    """Labels or masked positions on padding (odd, but allowed) still give the padded path's loss."""
    cfg = tiny_cfg.replace(head=HeadConfig(task="mlm"))
    model = bertfam.build_model(cfg, seed=0).eval()
    kw = _batch(cfg, B=3, T=9, seed=2)
    labels = torch.full_like(kw["input_ids"], IGNORE)
    labels[2, -1] = 7  # row 2 is padding at its end
    assert kw["attention_mask"][2, -1] == 0
    with torch.no_grad():
        a = model(**kw, labels=labels)
        b = model(**kw, labels=labels, packing="padded")
        c = model(**kw, labels=labels, masked_positions=labels != IGNORE)
    assert torch.equal(a.loss, b.loss) and abs(float(c.loss - b.loss)) <= TOL


def test_holes_in_the_mask(tiny_cfg):
    """A mask with holes after the first token (packed sequences): still exact on real tokens."""
    model = bertfam.build_model(tiny_cfg, seed=0).eval()
    kw = _batch(tiny_cfg, B=4, T=12, seed=4)
    kw["attention_mask"][:, 3] = 0
    real = kw["attention_mask"].bool()
    with torch.no_grad():
        d = _max_diff(model(**kw), model(**kw, packing="padded"), real)
    assert max(d.values()) <= TOL, d


@pytest.mark.parametrize("kernel", varlen.ATTENTION_KERNELS)
def test_attention_kernels_agree(kernel):
    g = torch.Generator().manual_seed(0)
    lengths = [7, 1, 12, 4]
    mask = (torch.arange(12)[None] < torch.tensor(lengths)[:, None])
    p = varlen.pack_info(mask, kernel)
    assert p.cu_seqlens.tolist() == [0, 7, 8, 20, 24] and p.num_tokens == 24 and p.max_len == 12
    qkv = torch.randn(24, 3, 2, 8, generator=g)
    out = varlen.attention(qkv, p)  # (N, h * d)
    ref = []
    for s, e in zip(p.cu_seqlens[:-1].tolist(), p.cu_seqlens[1:].tolist()):
        q, k, v = qkv[s:e].permute(1, 2, 0, 3)  # (h, L, d)
        w = torch.softmax(q @ k.transpose(-1, -2) / 8 ** 0.5, -1)
        ref.append((w @ v).transpose(0, 1).reshape(e - s, 16))
    assert out.shape == (24, 16)
    assert (out - torch.cat(ref)).abs().max() <= TOL
    buf = torch.full((24, 2, 8), float("nan"))  # the scratch path hands a buffer to write into
    into = varlen.attention(qkv, p, out=buf)
    assert torch.equal(into, out) and into.data_ptr() == buf.data_ptr()


def test_unpad_repad_roundtrip():
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1]])
    p = varlen.pack_info(mask)
    x = torch.arange(9.0).view(3, 3, 1)
    packed = varlen.unpad(x, p)
    assert packed.flatten().tolist() == [0, 1, 3, 6, 7, 8]
    back = varlen.repad(packed, p)
    assert torch.equal(back, x * mask[..., None])
    assert p.first.tolist() == [0, 2, 3]


# ---------------------------------------------------------------- scratch buffers (optimize_for_inference)
@pytest.mark.parametrize("family", sorted(FAMILY_CFGS))
@pytest.mark.parametrize("act", ["gelu", "relu", "gelu_new"])
@pytest.mark.parametrize("layout", ["packed", "full", "visibility", "hidden_states"])
def test_scratch_buffers_are_bit_identical(family, act, layout, monkeypatch):
    """After optimize_for_inference, no-grad forwards write the big intermediates into per-forward buffers
    reused by every layer (bertfam/modeling/optimize.py); the outputs must equal the plain path's exactly,
    and the buffers must really be used (counted) so the comparison is not plain path against plain path."""
    from bertfam.modeling import optimize
    cfg = FAMILY_CFGS[family]()
    cfg.hidden_act = act
    model = bertfam.build_model(cfg, seed=1).eval()
    kw = _batch(cfg)
    if layout == "full":
        kw["attention_mask"] = torch.ones_like(kw["attention_mask"])
    elif layout == "visibility":  # K-BERT style (B, T, T) matrix: the padded path with an additive mask
        m = kw["attention_mask"]
        kw["attention_mask"] = m[:, None, :] * m[:, :, None]
    elif layout == "hidden_states":
        kw["output_hidden_states"] = True
    calls = []
    real_get = optimize.Scratch.get
    monkeypatch.setattr(optimize.Scratch, "get", lambda self, *a: calls.append(a[0]) or real_get(self, *a))
    with torch.inference_mode():
        plain = model(**kw)
        assert calls == []
        fast = optimize.optimize_for_inference(model, linear="aten")(**kw)  # the buffer path, bit for bit
        applications = sum(len(step) for step in model.backbone.encoder.schedule())  # ALBERT: groups x inner
        assert calls.count("wide") == applications, "scratch path not taken"
    assert torch.equal(fast.last_hidden_state, plain.last_hidden_state)
    assert torch.equal(fast.pooler_output, plain.pooler_output)
    if layout == "hidden_states":  # every layer's output survives the buffer reuse of the next layers
        for a, b in zip(fast.hidden_states, plain.hidden_states, strict=True):
            assert torch.equal(a, b)


def test_scratch_buffers_only_without_autograd(tiny_cfg, monkeypatch):
    """Training (grad on, or train mode with dropout) never takes the buffer-reusing path."""
    from bertfam.modeling import optimize
    made = []
    orig = optimize.Scratch
    model = optimize.optimize_for_inference(bertfam.build_model(tiny_cfg, seed=1))
    kw = _batch(tiny_cfg)
    monkeypatch.setattr(optimize, "Scratch", lambda: made.append(1) or orig())
    model.train()
    model(**kw).last_hidden_state.sum().backward()
    with torch.no_grad():
        model(**kw)  # train mode: dropout active, the plain path
    model.eval()
    model(**kw).last_hidden_state.sum().backward()  # grad enabled
    assert made == []
    with torch.no_grad():
        model(**kw)
    assert made == [1]


def test_scratch_buffers_off_under_autocast(tiny_cfg):
    """autocast chooses each matmul's dtype; writing into float32 buffers would silently undo it."""
    from bertfam.modeling import optimize
    with torch.no_grad():
        assert optimize.buffers_allowed()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert not optimize.buffers_allowed()
    assert not optimize.buffers_allowed()  # grad on


def test_compile_turns_buffer_reuse_off(tiny_cfg):
    """compile=True wraps attn_residual / ffn_block; the buffer-reusing forward would bypass them."""
    from bertfam.modeling.optimize import is_compiled, optimize_for_inference, reuses_buffers
    model = optimize_for_inference(bertfam.build_model(tiny_cfg, seed=0).eval())
    assert reuses_buffers(model)
    optimize_for_inference(model, compile=True)  # wrapping is lazy: nothing compiles until a call
    assert not reuses_buffers(model) and is_compiled(model.backbone.encoder)
    optimize_for_inference(model)  # a compiled model stays compiled
    assert not reuses_buffers(model) and is_compiled(model.backbone.encoder)
