"""The task kind registry (bertfam/tasks/kinds.py): every name of a kind means that kind, every head, pipeline
and HTTP endpoint has its kind, an unknown name is one ConfigError line, and a kind registered from outside
is picked up by the task table, the model inputs, the pipelines and the endpoint lookup (adding a kind is one
entry). Also: no `kind ==` branch is left where the registry answers."""
from __future__ import annotations

import os
import re

import pytest

import bertfam
from bertfam import HeadConfig, Tokenizer, build_model, preset
from bertfam.config import HEAD_TASKS, LOAD_TASKS, TASK_ALIASES
from bertfam.convert.hf import HF_HEADS
from bertfam.data.labelled import Example
from bertfam.errors import ConfigError
from bertfam.modeling.heads import HEADS
from bertfam.tasks import kinds, pipelines
from bertfam.tasks.inputs import InputBuilder, collect_labels, gold
from bertfam.tasks.kinds import (KINDS, TaskKind, endpoint_kind, endpoints, kind_of_head, pipeline_kind,
                                 pipeline_names, register_kind, table_kind, task_kind)
from bertfam.tasks.pipelines import ClassificationPipeline, Pipeline
from bertfam.tasks.table import TaskSpec, custom_task
from bertfam.tasks.targets import Targets

from .conftest import ROOT, ZH_VOCAB


def _model(task: str = "classification", labels=("no", "yes")):
    tok = Tokenizer.from_vocab(ZH_VOCAB)
    head = HeadConfig(task=task, num_labels=len(labels), labels=list(labels)) if labels else HeadConfig(task=task)
    cfg = preset("bert-tiny", vocab_size=tok.vocab_size, hidden_size=32, num_attention_heads=2, intermediate_size=64,
                 num_hidden_layers=1, max_position_embeddings=64, head=head)
    model = build_model(cfg, seed=0)
    model.tokenizer = tok
    return model


# ------------------------------------------------------------------ names
@pytest.mark.parametrize("kind", list(KINDS.values()), ids=list(KINDS))
def test_every_name_of_a_kind_means_that_kind(kind):
    assert kind.names[0] == kind.name and kind_of_head(kind.head) is kind
    for name in kind.names:
        assert task_kind(name) is kind, name
    for spelled in kind.table_kinds:
        assert table_kind(spelled) is kind, spelled


def test_no_name_means_two_kinds():
    names = [n for k in KINDS.values() for n in k.names]
    assert len(names) == len(set(names)), names
    with pytest.raises(ConfigError, match="^task kind 'other': the name 'ner' is taken by the kind 'token'$"):
        register_kind(TaskKind("other", None, ClassificationPipeline, "other", aliases=("ner",)))
    with pytest.raises(ConfigError, match="^task kind 'other': the name 'pair' is taken by the kind 'classification'$"):
        register_kind(TaskKind("other", None, ClassificationPipeline, "other", table_kinds=("pair",)))
    assert "other" not in KINDS


def test_the_layers_below_tasks_name_the_same_kinds():
    """config.py keeps the names for config.json validation, from_pretrained(task=) and export --task (below
    tasks/): the same heads and kinds, and every alias there names a registered kind."""
    assert set(HEAD_TASKS) == {k.head for k in KINDS.values() if k.head is not None}
    assert set(LOAD_TASKS) == set(KINDS)
    assert {a: task_kind(a).name for a in TASK_ALIASES} == TASK_ALIASES


# ------------------------------------------------------------------ heads, pipelines, endpoints
def test_every_head_has_exactly_one_kind_and_a_hugging_face_form():
    for head, cls in HEADS.items():
        owners = [k for k in KINDS.values() if k.head == head]
        assert len(owners) == 1, (head, [k.name for k in owners])
        assert owners[0].head_class is cls
    assert [k.name for k in KINDS.values() if k.head is None] == ["encoder"]  # the bare backbone's kind
    assert set(HF_HEADS) == set(HEADS) | {None}  # convert/hf.py's per-head table, keyed by head name


def test_every_pipeline_resolves_to_a_kind():
    classes = [c for c in vars(pipelines).values()
               if isinstance(c, type) and issubclass(c, Pipeline) and c is not Pipeline]
    assert {c.task for c in classes} == set(pipeline_names())  # a pipeline class without a kind fails here
    for name in pipeline_names():
        assert pipeline_kind(name).pipeline.task == name
    for k in KINDS.values():
        for alias in k.aliases:
            assert pipeline_kind(alias).pipeline is k.pipeline, alias
    assert pipeline_kind("classification").name == "classification"
    assert pipeline_kind("fill-mask").name == "mlm"
    with pytest.raises(ConfigError, match="unknown pipeline task 'token'"):  # a head name that no pipeline has
        pipeline_kind("token")


def test_every_http_endpoint_resolves_to_a_kind():
    from bertfam.serving.app import create_app
    from bertfam.serving.service import Service

    service = Service([("clf", _model())])
    try:
        app = create_app(service)
        served = {r.path[len("/v1/"):] for r in app.routes if getattr(r, "path", "").startswith("/v1/")}
    finally:
        service.shutdown()
    assert served == set(endpoints())
    for ep in served:
        assert endpoint_kind(ep).endpoint == ep and task_kind(ep) is endpoint_kind(ep), ep
    assert set(service.routes) == {"classify", "embed"}  # its head's endpoint, and embed through its backbone


# ------------------------------------------------------------------ unknown names
def test_an_unknown_name_is_one_error_line_listing_the_known_ones():
    with pytest.raises(ConfigError) as e:
        task_kind("nerd")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("unknown task kind 'nerd'; known: ")
    assert all(n in msg for k in KINDS.values() for n in k.names)
    with pytest.raises(ConfigError) as e:
        pipeline_kind("nerd")
    assert "\n" not in str(e.value) and all(n in str(e.value) for n in pipeline_names())
    with pytest.raises(ConfigError, match="^custom task kind 'nerd' not in single, pair, regression, token$"):
        custom_task("tsv", "nerd", ["text"], "label")
    with pytest.raises(ConfigError, match="^unknown endpoint 'nerd'; known: classify, ner, fill-mask, mrc, embed$"):
        endpoint_kind("nerd")


# ------------------------------------------------------------------ one entry
class YesNoTargets(Targets):
    """Always the labels no, yes; names come back upper case (so the test sees these methods ran)."""

    def collect(self, fixed, examples):
        return ["no", "yes"]

    def names(self, preds, labels):
        return [labels[i].upper() for i in preds]


class YesNoPipeline(ClassificationPipeline):
    task = "yes-no-check"

    def predict_batch(self, items):
        return [dict(r, yes_no=True) for r in super().predict_batch(items)]


@pytest.fixture
def yes_no(monkeypatch):
    monkeypatch.setattr(kinds, "KINDS", dict(KINDS))  # registered for this test only
    return register_kind(TaskKind("yesno", "classification", YesNoPipeline, "yes-no", aliases=("yes-or-no",),
                                  table_kinds=("yesno",), targets=YesNoTargets()))


def test_a_kind_registered_from_outside_is_picked_up_everywhere(yes_no, tmp_path):
    examples = [Example(guid=str(i), text_a=t, label=lab) for i, (t, lab) in
                enumerate([("今天天气很好", "yes"), ("股市大跌", "no"), ("好", "yes")])]
    spec = TaskSpec("yn", "yesno", reader=lambda path: examples)
    assert spec.task_kind is yes_no and spec.head == "classification"
    labels = collect_labels(spec, [])
    assert labels == ["no", "yes"] and gold(examples, spec) == ["yes", "no", "yes"]
    model = _model()
    builder = InputBuilder(model.tokenizer, spec, labels, max_length=16)
    inputs = builder.build(examples)
    assert builder.collate(inputs)["labels"].tolist() == [1, 0, 1]
    names = builder.label_names(builder.predict(model, inputs))
    assert len(names) == 3 and set(names) <= {"NO", "YES"}
    # the task table's custom tasks and `finetune --kind` take it
    (tmp_path / "d.tsv").write_text("text\tlabel\n好\tyes\n", encoding="utf-8")
    custom = custom_task("tsv", "yesno", ["text"], "label")
    assert custom.task_kind is yes_no and [e.label for e in custom.read(str(tmp_path / "d.tsv"))] == ["yes"]
    from bertfam.runners.finetune import custom_kinds

    assert "yesno" in custom_kinds()
    # pipelines by its names, its endpoint
    for name in ("yes-or-no", "yes-no-check"):  # its alias, its pipeline's name
        pipe = bertfam.pipeline(name, model)
        assert isinstance(pipe, YesNoPipeline), name
    assert pipe("今天天气很好")[0]["yes_no"] is True
    assert endpoint_kind("yes-no") is yes_no and task_kind("yesno") is yes_no
    with pytest.raises(ConfigError, match="a yes-no-check pipeline needs a classification head; this model has "
                                          "a token head"):
        bertfam.pipeline("yes-or-no", _model("token", ("O", "B-X")))


def test_a_kind_registered_in_a_test_is_gone_after_it():
    assert kinds.KINDS is KINDS and "yesno" not in KINDS


# ------------------------------------------------------------------ no branches left
@pytest.mark.parametrize("rel", ["bertfam/tasks/inputs.py", "bertfam/runners/finetune.py",
                                 "bertfam/serving/app.py", "bertfam/serving/service.py", "bertfam/tasks/table.py",
                                 "bertfam/tasks/pipelines.py"])
def test_no_kind_branches_where_the_registry_answers(rel):
    src = open(os.path.join(ROOT, rel), encoding="utf-8").read()
    found = re.findall(r".*\bkind\s*(?:==|!=|\bin\b)\s*[\"'(].*", src)
    assert not found, found


def test_the_pipeline_function_is_the_registrys():
    assert bertfam.pipeline is kinds.pipeline
    assert not [n for n in ("TASK_OF_HEAD", "HEADS_OF", "ALIASES", "PIPELINES") if hasattr(pipelines, n)]
