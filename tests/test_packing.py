"""One packing switch: `packing` (bertfam.modeling.layout.PACKING), per model or per call, selects the padded
path, the packed path with the device's kernel ("auto") or with a named kernel; every value gives the same
numbers on real tokens, a wrong value is one ConfigError line naming the setting, and nothing else (no
environment variable) changes the layout."""
import os

import pytest
import torch

import bertfam
from bertfam import HeadConfig
from bertfam.modeling import layout, varlen

from .conftest import ROOT
from .test_varlen import _batch

TOL = 1e-5
KERNELS = list(varlen.ATTENTION_KERNELS)


def _model(cfg, task=None):
    return bertfam.build_model(cfg.replace(head=HeadConfig(task=task)), seed=0).eval()


def _expected_kernel(packing: str) -> object:
    """The plan's kernel a setting should give on this (CPU) batch; None = padded (no plan)."""
    if packing == "padded":
        return None
    return varlen.default_kernel(torch.device("cpu")) if packing == "auto" else packing


def test_packing_values_are_auto_padded_and_the_kernels():
    assert layout.PACKING == ("auto", "padded", *varlen.ATTENTION_KERNELS)


@pytest.mark.parametrize("packing", layout.PACKING)
def test_each_setting_selects_its_path_per_model_and_per_call(tiny_cfg, packing):
    bb = _model(tiny_cfg).backbone
    assert bb.packing == "auto"  # a new model packs where exact
    kw = _batch(tiny_cfg, B=4, T=11, seed=1)
    ids, mask = kw["input_ids"], kw["attention_mask"]
    with torch.no_grad():
        per_call = bb.encode(ids, mask, packing=packing)
        assert bb.packing == "auto"  # a call's value is for that call only
        bb.packing = packing
        per_model = bb.encode(ids, mask)
    for enc in (per_call, per_model):
        assert (enc.plan.kernel if enc.plan is not None else None) == _expected_kernel(packing)


@pytest.mark.parametrize("packing", [p for p in layout.PACKING if p != "padded"])
def test_every_packed_setting_gives_the_padded_hidden_states(tiny_cfg, packing):
    model = _model(tiny_cfg)
    kw = _batch(tiny_cfg, B=5, T=13, seed=2)
    real = kw["attention_mask"].bool()
    with torch.no_grad():
        padded = model(**kw, packing="padded")
        per_call = model(**kw, packing=packing)
        model.packing = packing
        per_model = model(**kw)
    assert padded.last_hidden_state[~real].abs().max() > 0  # padded really ran padded ...
    for out in (per_call, per_model):
        assert out.last_hidden_state[~real].abs().max() == 0  # ... and these packed (zeros at padding)
        assert (out.last_hidden_state - padded.last_hidden_state)[real].abs().max() <= TOL
        assert (out.pooler_output - padded.pooler_output).abs().max() <= TOL


def test_padded_setting_matches_a_batch_without_padding(tiny_cfg):
    """"padded" is the reference: each row alone (no padding, so nothing to pack) gives its numbers."""
    model = _model(tiny_cfg)
    model.packing = "padded"
    kw = _batch(tiny_cfg, B=3, T=9, seed=3)
    with torch.no_grad():
        out = model(**kw).last_hidden_state
        for b, n in enumerate(kw["attention_mask"].sum(1).tolist()):
            alone = model(**{k: v[b:b + 1, :n] for k, v in kw.items()}).last_hidden_state[0]
            assert (out[b, :n] - alone).abs().max() <= TOL


def test_the_task_model_setting_is_the_backbones(tiny_cfg):
    model = _model(tiny_cfg, task="mlm")
    model.packing = "padded"
    assert model.backbone.packing == "padded"
    model.backbone.packing = "block"
    assert model.packing == "block"


@pytest.mark.parametrize("bad", ["packed", "PADDED", "", None, False, True])
def test_a_wrong_value_is_one_line_naming_the_setting(tiny_cfg, bad):
    model = _model(tiny_cfg)
    kw = _batch(tiny_cfg, B=2, T=7)
    want = f"packing {bad!r} not in auto, padded, {', '.join(KERNELS)}"
    with pytest.raises(bertfam.ConfigError) as e:
        model.packing = bad
    assert str(e.value) == want and model.packing == "auto"  # refused, the setting unchanged
    if bad is None:  # per call, None means "the model's setting"
        return
    with pytest.raises(bertfam.ConfigError) as e:
        model(**kw, packing=bad)
    assert str(e.value) == want


def test_no_environment_variable_changes_the_layout(tiny_cfg, monkeypatch):
    monkeypatch.setenv("BERTFAM_PADDED", "1")
    monkeypatch.setenv("BERTFAM_VARLEN_KERNEL", "block")
    bb = _model(tiny_cfg).backbone
    kw = _batch(tiny_cfg, B=3, T=9)
    with torch.no_grad():
        enc = bb.encode(kw["input_ids"], kw["attention_mask"])
    assert bb.packing == "auto" and enc.plan is not None and enc.plan.kernel == _expected_kernel("auto")


@pytest.mark.parametrize("folder", ["bertfam", "benchmarks"])
def test_no_module_reads_the_old_environment_switches(folder):
    """The layout has one switch, `packing`; a benchmark that needs a path sets it, not the environment."""
    found = []
    for dirpath, _, files in os.walk(os.path.join(ROOT, folder)):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                text = open(path, encoding="utf-8").read()
                found += [(os.path.relpath(path, ROOT), var) for var in ("BERTFAM_PADDED", "BERTFAM_VARLEN_KERNEL")
                          if var in text]
    assert found == []


def test_packed_is_not_a_setting():
    """Setting the old attribute fails loudly instead of leaving the model packed without a word."""
    import bertfam
    from bertfam import HeadConfig, preset

    for model in (bertfam.build_model(preset("bert-tiny", vocab_size=50), seed=0),
                  bertfam.build_model(preset("bert-tiny", vocab_size=50, head=HeadConfig(task="classification",
                                                                                        num_labels=2)), seed=0)):
        with pytest.raises(AttributeError, match=r"model.packed is not a setting: set model.packing \(auto, padded"):
            model.packed = False
        with pytest.raises(AttributeError):  # reading it is nn.Module's "no attribute" (a loud failure already)
            model.packed
        assert model.packing == "auto"
