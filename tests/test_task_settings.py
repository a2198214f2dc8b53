"""Typed task settings on the head (head.mrc: MRCSettings, head.finetune: FinetuneSettings) instead of the old
free-form head.extra (tests/test_upgrade.py: `bertfam upgrade` rewrites it), each default defined once;
provenance in training_info.json beside config.json."""
import dataclasses
import inspect
import json
import os

import pytest

import bertfam
from bertfam import HeadConfig, ModelConfig, Tokenizer, build_model, preset
from bertfam.config import TRAINING_INFO_FILE, FinetuneSettings, MRCSettings, read_training_info
from bertfam.errors import ConfigError

from .conftest import ROOT, ZH_VOCAB

SHIPPED = f"{ROOT}/models/mrc-zh-e5small-l12"


def _span_cfg(**head) -> ModelConfig:
    tok = Tokenizer.from_vocab(ZH_VOCAB)
    return preset("bert-tiny", vocab_size=tok.vocab_size, num_hidden_layers=1, max_position_embeddings=128,
                  head=HeadConfig(task="span", **head))


# ------------------------------------------------------------------ the shipped model
def test_the_shipped_model_has_the_new_layout_and_its_values():
    d = json.load(open(f"{SHIPPED}/config.json"))
    assert "extra" not in d["head"]
    # int8 on disk only: it loads as a float model (the out-of-fold scores were measured so)
    assert d["quantization"]["method"] == "weight-int8"
    cfg = bertfam.from_pretrained(SHIPPED).config
    assert cfg.quantization is None and cfg.num_hidden_layers == 12
    # decoding and the fused answerability model chosen out of fold by recipes/mrc_checklist_cv.py --final;
    # the fused model chosen does without the verifier, so the model names none
    mrc = cfg.head.mrc
    assert (mrc.max_length, mrc.doc_stride, mrc.max_answer_length, mrc.use_title, mrc.answer_extension) == \
        (256, 128, 32, True, "none")
    assert (mrc.null_threshold, mrc.answerable_threshold, mrc.verifier, mrc.verifier_threshold,
            mrc.question_overlap_penalty) == (-1e9, 0.75, None, -1.0, 5.0)
    from bertfam.tasks.mrc.answerability import FEATURES

    assert mrc.answerability.features == list(FEATURES)
    coef = dict(zip(mrc.answerability.features, mrc.answerability.coef))
    assert coef["relevance"] == 0.0 and coef["null_diff"] > 0 and coef["has_title"] < 0
    # fitted with the reader's signals bounded at >= 0 (answerability.NONNEGATIVE)
    assert all(coef[n] >= 0.0 for n in ("null_diff", "reader_logit", "top_prob", "relevance"))
    assert cfg.head.side_directories() == []
    info = read_training_info(SHIPPED)
    assert info["tuned_dev_f1"] == 59.432 and "demo_seen_qids" not in info and cfg.head.info == info
    cv = info["cross_validation"]
    assert (cv["questions"], cv["folds"], cv["oof_f1"], cv["baseline_f1"]) == (567, 5, 59.1, 52.6)
    assert cv["label"] == "fused signals (logistic regression) + 599 --fused-extra questions in its fit"
    # each fold model's weights are 0.7 x the general stage's + 0.3 x fine-tuned (--base-weight 0.7)
    assert info["runs"][-1]["base_weight"] == 0.7
    # each checklist question read once with its title and once without (--untitled-copies 1)
    assert (info["runs"][-1]["repeat"], info["runs"][-1]["untitled_copies"]) == (2, 1)


# ------------------------------------------------------------------ one default each
def test_mrc_defaults_are_defined_once():
    from bertfam.commands import mrc as mrc_cmd
    from bertfam.tasks import mrc

    m = build_model(_span_cfg(), seed=0)  # saved without settings (e.g. a Hugging Face import)
    m.tokenizer = Tokenizer.from_vocab(ZH_VOCAB)
    assert m.config.head.mrc is None
    p = mrc.MRCPredictor(m)
    D = MRCSettings()
    assert p.settings == dataclasses.replace(D, max_length=min(D.max_length, 128))  # clamped to the positions
    sig = inspect.signature(mrc.train_mrc).parameters
    assert (sig["max_length"].default, sig["doc_stride"].default, sig["max_query_length"].default) == \
        (D.max_length, D.doc_stride, D.max_query_length)
    # the predictor's settings are one MRCSettings (None: the model's); its other arguments say how to run
    params = inspect.signature(mrc.MRCPredictor).parameters
    assert list(params) == ["models", "settings", "verifier", "batch_size", "int8", "optimize"]
    assert params["settings"].default is None
    # no second literal of a default in the modules that use them
    import importlib

    subs = [importlib.import_module(f"bertfam.tasks.mrc.{n}") for n in
            ("predictor", "decoding", "ensemble", "thresholds", "training", "scoring")]
    for mod in (*subs, mrc_cmd, importlib.import_module("bertfam.runners.mrc"), bertfam.tasks.pipelines):
        src = inspect.getsource(mod)
        assert "384" not in src and "get(\"max_length\"" not in src, mod.__name__


def test_mrc_pipeline_uses_the_models_windows_else_the_defaults():
    m = build_model(_span_cfg(), seed=0)
    m.tokenizer = Tokenizer.from_vocab(ZH_VOCAB)
    pipe = bertfam.pipeline("mrc", m)
    assert (pipe.inner.settings.max_length, pipe.inner.settings.doc_stride) == (128, min(MRCSettings.doc_stride, 64))
    m.config.head.mrc = MRCSettings(max_length=96, doc_stride=32)
    pipe = bertfam.pipeline("mrc", m)
    assert (pipe.inner.settings.max_length, pipe.inner.settings.doc_stride) == (96, 32)


def test_finetune_defaults_are_defined_once():
    from bertfam.cli import build_parser
    from bertfam.runners.finetune import FinetuneOptions
    from bertfam.tasks.inputs import InputBuilder

    assert FinetuneOptions().max_length == FinetuneSettings.max_length == 128
    assert inspect.signature(InputBuilder).parameters["max_length"].default == FinetuneSettings.max_length
    args = build_parser().parse_args(["finetune", "--task", "sst2", "--model", "m", "--train", "t", "--out", "o"])
    args.func.merge(args)  # the command line's defaults come in with the run file's values
    assert args.max_length == FinetuneSettings.max_length


# ------------------------------------------------------------------ types
@pytest.mark.parametrize("field,value", [("max_length", "256"), ("doc_stride", 1.5), ("use_title", 1),
                                         ("null_threshold", "2.5"), ("answerable_threshold", True),
                                         ("max_answer_length", None)])
def test_a_bad_type_in_mrc_settings_names_the_field(tmp_path, field, value):
    d = _span_cfg(mrc=MRCSettings()).to_dict()
    d["head"]["mrc"][field] = value
    p = tmp_path / "config.json"
    p.write_text(json.dumps(d))
    with pytest.raises(ConfigError, match=rf"{p}: head\.mrc\.{field} must be"):
        ModelConfig.load(str(p))


def test_bad_settings_values_and_keys():
    with pytest.raises(ConfigError, match=r"head\.mrc\.answerable_threshold must be a probability"):
        MRCSettings(answerable_threshold=1.5)
    with pytest.raises(ConfigError, match=r"head\.mrc\.max_length must be a positive integer"):
        MRCSettings(max_length=0)
    with pytest.raises(ConfigError, match=r"head\.mrc: unknown field\(s\) window"):
        HeadConfig(task="span", mrc={"window": 3})
    with pytest.raises(ConfigError, match=r"head\.finetune\.kg\[0\] must be a string"):
        FinetuneSettings(task="x", kg=[3])
    with pytest.raises(ConfigError, match=r"head\.finetune\.custom\.header must be true or false"):
        HeadConfig(finetune={"task": "custom", "custom": {"header": "yes"}})
    # ints are numbers: a JSON threshold written as 1 is 1.0
    assert MRCSettings(null_threshold=1).null_threshold == 1.0


# ------------------------------------------------------------------ training_info.json
def test_training_info_is_written_beside_config_and_not_into_it(tmp_path):
    m = build_model(_span_cfg(mrc=MRCSettings(max_length=64)), seed=0)
    m.config.head.info = {"demo_seen_qids": ["q1"], "note": "tuned on dev"}
    m.save_pretrained(str(tmp_path))
    assert "note" not in (tmp_path / "config.json").read_text()
    assert json.load(open(tmp_path / TRAINING_INFO_FILE)) == {"demo_seen_qids": ["q1"], "note": "tuned on dev"}
    back = bertfam.from_pretrained(str(tmp_path))
    assert back.config.head.info == m.config.head.info and back.config.head.mrc.max_length == 64
    # a model saved without info over that directory does not inherit it
    m.config.head.info = {}
    m.save_pretrained(str(tmp_path))
    assert not (tmp_path / TRAINING_INFO_FILE).exists()
    assert bertfam.from_pretrained(str(tmp_path)).config.head.info == {}


def test_info_does_not_make_configs_differ():
    a, b = _span_cfg(), _span_cfg()
    b.head.info = {"x": 1}
    assert a == b
