"""optimize_for_inference: the optimised model answers as the plain one (every head, padded and packed
batches), training and autograd never take the optimised path, and the swap changes no weights or names."""
import copy

import pytest
import torch

import bertfam
from bertfam import HeadConfig
from bertfam.modeling import optimize
from bertfam.modeling.encoder import Encoder, Layer
from bertfam.modeling.optimize import optimize_for_inference, reuses_buffers

from .swap_helpers import restore_plain
from .test_varlen import HEADS, _batch, _labels

FIELDS = ("last_hidden_state", "pooler_output", "logits", "pair_logits", "start_logits", "end_logits",
          "answerable_logits", "loss")


def _count_scratch(monkeypatch) -> list:
    made = []
    real = optimize.Scratch
    monkeypatch.setattr(optimize, "Scratch", lambda: made.append(1) or real())
    return made


def _same(a, b, tol=1e-5) -> None:
    for name in FIELDS:
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            assert x.shape == y.shape and float((x - y).abs().max()) <= tol, name


PACKING = {"packed": "auto", "padded": "padded"}  # layout -> the model's packing setting


@pytest.mark.parametrize("head", HEADS, ids=lambda h: "-".join(str(v) for v in h.values()))
@pytest.mark.parametrize("layout", list(PACKING))
def test_optimised_equals_plain_for_every_head(tiny_cfg, head, layout, monkeypatch):
    cfg = tiny_cfg.replace(head=HeadConfig(**head))
    plain = bertfam.build_model(cfg, seed=0).eval()
    fast = optimize_for_inference(copy.deepcopy(plain))
    kw = _batch(cfg, B=4, T=11, seed=3)
    extra = _labels(cfg.head.task, cfg, kw, torch.Generator().manual_seed(5))
    made = _count_scratch(monkeypatch)
    with torch.inference_mode():
        for batch in (kw, dict(kw, **extra)):
            a = plain(**batch, packing=PACKING[layout])
            assert made == []
            b = fast(**batch, packing=PACKING[layout])
            assert made, "the optimised path was not taken"
            _same(a, b)
            made.clear()


def test_training_and_autograd_never_take_the_optimised_path(tiny_cfg, monkeypatch):
    cfg = tiny_cfg.replace(head=HeadConfig(task="token", num_labels=3))
    model = optimize_for_inference(bertfam.build_model(cfg, seed=0))
    kw = _batch(cfg, B=3, T=9)
    made = _count_scratch(monkeypatch)
    model.train()
    model(**kw).logits.sum().backward()  # train mode, grad on
    with torch.no_grad():
        model(**kw)  # train mode (dropout), no grad
    model.eval()
    model(**kw).logits.sum().backward()  # eval mode, grad on
    with torch.no_grad():
        model(**kw, output_attentions=True)  # raw scores: the plain attention
    assert made == []
    assert model.backbone.encoder.layers[0].ffn_in.weight.grad is not None


def test_swap_is_in_place_idempotent_and_reversible(tiny_cfg):
    model = bertfam.build_model(tiny_cfg.replace(head=HeadConfig(task="span")), seed=0).eval()
    names = list(model.state_dict())
    params = [id(p) for p in model.parameters()]
    assert optimize_for_inference(model) is model and reuses_buffers(model)
    optimize_for_inference(model)
    assert list(model.state_dict()) == names and [id(p) for p in model.parameters()] == params
    twin = copy.deepcopy(model)  # the head's parts stay the model's registered modules
    assert twin.head.parts["span"] is twin.span and twin.span is not model.span
    assert restore_plain(model) is model and not reuses_buffers(model)
    assert type(model.backbone.encoder) is Encoder
    assert all(type(layer) is Layer for layer in model.backbone.encoder.layers)
    with pytest.raises(ValueError):
        optimize_for_inference(model, reuse_buffers=True, compile=True)


def test_multimodal_model_reuses_buffers(monkeypatch):
    from bertfam.multimodal.config import MultimodalConfig
    from bertfam.multimodal.model import build_multimodal

    cfg = bertfam.preset("bert-tiny", vocab_size=60, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=40, head=HeadConfig(task="classification",
                                                                                           num_labels=2))
    plain = build_multimodal(cfg, MultimodalConfig(modality="image", feature_dim=6), seed=0).eval()
    fast = optimize_for_inference(copy.deepcopy(plain))
    kw = dict(input_ids=torch.randint(5, 60, (2, 7)), features=torch.randn(2, 3, 6), labels=torch.tensor([0, 1]))
    made = _count_scratch(monkeypatch)
    with torch.inference_mode():
        a, b = plain(**kw), fast(**kw)
    assert made == [1]
    _same(a, b)


def test_swap_replaces_modules_and_keeps_the_parameters(tiny_cfg):
    """New encoder and layer modules set in their parents (the old objects keep their class), holding the
    very parameters: an optimizer built before the swap still trains the model; restore_plain round-trips."""
    model = bertfam.build_model(tiny_cfg.replace(head=HeadConfig(task="token", num_labels=3)), seed=0).eval()
    kw = _batch(model.config, B=3, T=9, seed=2)
    with torch.inference_mode():
        want = model(**kw).logits
    old_enc, old_layers = model.backbone.encoder, list(model.backbone.encoder.layers)
    params, names = dict(model.named_parameters()), list(model.state_dict())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    # aten and no fused attention: the buffer path alone, bit for bit
    assert optimize_for_inference(model, linear="aten", fused_attention=False) is model
    enc = model.backbone.encoder
    assert isinstance(enc, optimize.ReusingEncoder) and enc is not old_enc and type(old_enc) is Encoder
    assert all(type(la) is optimize.ReusingLayer for la in enc.layers)
    assert all(type(la) is Layer and la is not new for la, new in zip(old_layers, enc.layers))
    assert enc.layers is old_enc.layers  # the same ModuleList, its entries replaced by index
    assert {n: id(p) for n, p in model.named_parameters()} == {n: id(p) for n, p in params.items()}
    assert list(model.state_dict()) == names
    with torch.inference_mode():
        assert torch.equal(model(**kw).logits, want)  # bit for bit
    model.train()
    before = params["backbone.encoder.layers.0.ffn_in.weight"].detach().clone()
    model(**kw).logits.sum().backward()
    opt.step()
    assert not torch.equal(model.backbone.encoder.layers[0].ffn_in.weight, before)  # the old optimizer trains it
    model.eval()
    swapped = model.backbone.encoder
    assert restore_plain(model) is model
    assert type(model.backbone.encoder) is Encoder and model.backbone.encoder is not swapped
    assert type(swapped) is optimize.ReusingEncoder
    assert all(type(la) is Layer for la in model.backbone.encoder.layers)
    assert {n: id(p) for n, p in model.named_parameters()} == {n: id(p) for n, p in params.items()}
    assert list(model.state_dict()) == names


def test_a_bare_encoder_is_returned_replaced(tiny_cfg):
    enc = bertfam.build_model(tiny_cfg, seed=0).backbone.encoder.eval()
    fast = optimize_for_inference(enc)
    assert type(fast) is optimize.ReusingEncoder and type(enc) is Encoder and fast.layers is enc.layers
    assert type(restore_plain(fast)) is Encoder


def test_unknown_or_misplaced_compile_options_are_errors():
    """optimize_for_inference's extra keywords are torch.compile's, only with compile=True: a misspelt one
    (int_8=True) is an error naming it, not an option silently swallowed."""
    import pytest

    from bertfam import build_model, preset
    from bertfam.modeling.optimize import optimize_for_inference

    m = build_model(preset("bert-tiny", vocab_size=50, hidden_size=16, num_attention_heads=2, intermediate_size=32,
                           num_hidden_layers=1, max_position_embeddings=16), seed=0).eval()
    with pytest.raises(TypeError, match="int_8 given without compile=True"):
        optimize_for_inference(m, int_8=True)
    with pytest.raises(TypeError, match="unknown torch.compile option.* modee; known: .*mode"):
        optimize_for_inference(m, compile=True, modee="max-autotune")
