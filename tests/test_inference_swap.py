"""The inference swap (optimize_for_inference) happens at prediction entry points only: a model in training
(train_mrc's dev evaluation and threshold tuning, a fine-tuning evaluation, a distillation student) keeps
its plain modules, the very objects it was built with; the predictors that are entry points swap."""
import os

import pytest
import torch

import bertfam
from bertfam import ConfigError, HeadConfig, Tokenizer
from bertfam.modeling import optimize
from bertfam.modeling.encoder import Encoder, Layer

from .conftest import FIXTURES, ZH_VOCAB
from .test_mrc_task import tiny_span_model


@pytest.fixture
def swapped(monkeypatch) -> list:
    """The models optimize.py's swap was asked to change."""
    seen = []
    real = optimize._swap

    def spy(model, plain):
        seen.append(model)
        return real(model, plain)

    monkeypatch.setattr(optimize, "_swap", spy)
    return seen


def _modules(model) -> list:
    return [model.backbone.encoder, *model.backbone.encoder.layers]


def _plain_and_same(model, before: list) -> None:
    now = _modules(model)
    assert len(now) == len(before) and all(a is b for a, b in zip(now, before)), "a module was replaced"
    assert type(now[0]) is Encoder and all(type(layer) is Layer for layer in now[1:])


def test_train_mrc_never_swaps_the_model_in_training(tmp_path, swapped):
    from bertfam.data.mrc import read_mrc
    from bertfam.tasks.mrc import train_mrc
    from bertfam.training import TrainConfig

    tok = Tokenizer.from_vocab(ZH_VOCAB)
    model = tiny_span_model(tok)
    before = _modules(model)
    exs, _ = read_mrc(os.path.join(FIXTURES, "mrc", "cmrc2018_trial_cut.json"), mode="train")
    s = train_mrc(model, exs, str(tmp_path / "run"), exs[:3], max_length=64, doc_stride=16,
                  train=TrainConfig(epochs=1, batch_size=8, progress=False))
    assert s["last_eval"]["questions"] == 3 and "thresholds" in s  # evaluated during training, then tuned
    _plain_and_same(model, before)
    assert not [m for m in swapped if m is model]


def test_mrc_predictor_swaps_as_an_entry_point_unless_told_not_to(swapped):
    from bertfam.tasks.mrc import MRCPredictor

    tok = Tokenizer.from_vocab(ZH_VOCAB)
    model = tiny_span_model(tok)
    before = _modules(model)
    MRCPredictor(model, verifier=False, optimize=False)
    _plain_and_same(model, before)
    with pytest.raises(ConfigError, match="optimize"):
        MRCPredictor(model, verifier=False, optimize=False, int8=True)
    MRCPredictor(model, verifier=False)
    assert optimize.reuses_buffers(model) and swapped == [model]


def test_a_finetuning_evaluation_never_swaps(swapped):
    """InputBuilder.predict is what fine-tuning's (and distillation's) evaluation runs on the model in
    training: it runs the model as given and gives it back in the mode it had."""
    from bertfam.data.labelled import Example
    from bertfam.tasks.inputs import InputBuilder
    from bertfam.tasks.table import get_task

    tok = Tokenizer.from_vocab(ZH_VOCAB)
    labels = ["O", "B-name", "I-name"]
    cfg = bertfam.preset("bert-tiny", vocab_size=tok.vocab_size, num_hidden_layers=1, max_position_embeddings=64,
                         head=HeadConfig(task="token", num_labels=3, labels=labels))
    model = bertfam.build_model(cfg, seed=0).train()
    before = _modules(model)
    builder = InputBuilder(tok, get_task("cluener"), labels, 32)
    inputs = builder.build([Example("x", tokens=list("张三在北京"), tags=["B-name", "I-name", "O", "O", "O"])])
    assert len(builder.predict(model, inputs)) == 1
    assert model.training and swapped == []
    _plain_and_same(model, before)


def test_distillation_swaps_the_teacher_only():
    from bertfam.distill import DistillConfig, DistillModel

    cfg = bertfam.preset("bert-tiny", vocab_size=60, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=40,
                         head=HeadConfig(task="classification", num_labels=2))
    teacher, student = bertfam.build_model(cfg, seed=0), bertfam.build_model(cfg, seed=1)
    before = _modules(student)
    dm = DistillModel(student, teacher, DistillConfig(stage="intermediate"))
    assert optimize.reuses_buffers(dm.teacher)
    _plain_and_same(dm.student, before)
    ids = torch.randint(5, 60, (2, 7))
    out = dm(input_ids=ids, attention_mask=torch.ones_like(ids))
    out.loss.backward()  # the student trains through its own (plain) modules
    assert student.backbone.encoder.layers[0].ffn_in.weight.grad is not None
