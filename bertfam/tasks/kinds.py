"""The task kinds: one entry per kind of answer a model is trained to give, and every lookup by a task's name.

A task kind is what one head answers (classification, regression, token, span, mlm, pretraining) or, for a
bare backbone, `encoder`. Its `TaskKind` entry holds everything above the model layer knows about it:
- `name` and `aliases`: the names a caller may use for it (`bertfam.pipeline`, `from_pretrained(task=)`,
  `export --task`, the HTTP endpoint's name). The built-in kinds take their aliases from
  `config.TASK_ALIASES`, the one name table, kept in config.py because config.json validation and
  `from_pretrained` read it below this layer;
- `head`: the key of its head class in `modeling.heads.HEADS` (None: no head);
- `table_kinds`: how the task table spells it (`TaskSpec.kind`, `finetune --kind`, `head.finetune.kind`,
  kept as saved checkpoints write it): classification is "single" (one text) or "pair" (two texts);
- `targets`: the fine-tuning targets (`tasks/targets.py`: labels, collate, decoding, label names, the
  predictions file); None for a kind the task table does not fine-tune;
- `pipeline`: the `tasks/pipelines.py` class that answers a model with this head (its preprocessing,
  decoding and result shape), and `endpoint`: the `bertfam serve` endpoint, /v1/<endpoint>, that runs it.
The Hugging Face key table of a head stays in `convert/hf.py` (`HF_HEADS`, by head name): conversion sits
below this layer. Adding a kind is one `register_kind(TaskKind(...))` here (docs/architecture.md says how).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..config import TASK_ALIASES
from ..errors import ConfigError
from ..modeling.heads import HEADS
from .pipelines import (ClassificationPipeline, EmbedPipeline, FillMaskPipeline, MRCPipeline, NERPipeline,
                        Pipeline)
from .targets import RegressionTargets, Targets, TokenTargets


@dataclass(frozen=True)
class TaskKind:
    """One kind of answer: everything above the model layer needs to train, run and serve it."""

    name: str
    head: Optional[str]  # modeling.heads.HEADS key; None: a bare encoder (no head)
    pipeline: type  # a tasks.pipelines.Pipeline subclass
    endpoint: str  # /v1/<endpoint> of `bertfam serve`
    aliases: tuple = ()
    table_kinds: tuple = ()  # TaskSpec.kind values that mean this kind
    targets: Optional[Targets] = None  # fine-tuning targets; None: not a task-table kind

    @property
    def head_class(self) -> Optional[type]:
        return HEADS[self.head] if self.head is not None else None

    @property
    def names(self) -> tuple:
        return (self.name,) + tuple(self.aliases)


KINDS: dict[str, TaskKind] = {}  # name -> kind, in registration order (error messages list them so)


def register_kind(kind: TaskKind) -> TaskKind:
    """Add a kind. ConfigError when one of its names (or table spellings) is taken, its head is not in
    modeling's HEADS, or its pipeline is not a Pipeline: a lookup takes the first match, so a second kind of
    one name would never be found."""
    taken = {n: k.name for k in KINDS.values() for n in k.names + tuple(k.table_kinds)}
    clash = [n for n in kind.names + tuple(kind.table_kinds) if n in taken]
    if clash:
        raise ConfigError(f"task kind {kind.name!r}: the name {clash[0]!r} is taken by the kind {taken[clash[0]]!r}")
    if kind.head is not None and kind.head not in HEADS:
        raise ConfigError(f"task kind {kind.name!r}: head {kind.head!r} not in modeling's heads {', '.join(HEADS)}")
    if not (isinstance(kind.pipeline, type) and issubclass(kind.pipeline, Pipeline)):
        raise ConfigError(f"task kind {kind.name!r}: its pipeline must be a tasks.pipelines.Pipeline subclass")
    KINDS[kind.name] = kind
    return kind


def _aliases(name: str) -> tuple:
    return tuple(a for a, n in TASK_ALIASES.items() if n == name)


def _builtin(name: str, head: Optional[str], pipeline: type, endpoint: str, **kw) -> TaskKind:
    return register_kind(TaskKind(name, head, pipeline, endpoint, aliases=_aliases(name), **kw))


# Order matters only where a lookup takes the first match: a pipeline's or endpoint's name means the first
# kind it serves (classification before regression, mlm before pretraining), and messages list kinds so.
_builtin("classification", "classification", ClassificationPipeline, "classify", table_kinds=("single", "pair"),
         targets=Targets())
_builtin("regression", "regression", ClassificationPipeline, "classify", table_kinds=("regression",),
         targets=RegressionTargets())
_builtin("token", "token", NERPipeline, "ner", table_kinds=("token",), targets=TokenTargets())
_builtin("mlm", "mlm", FillMaskPipeline, "fill-mask")
_builtin("pretraining", "pretraining", FillMaskPipeline, "fill-mask")
_builtin("span", "span", MRCPipeline, "mrc")  # MRC's windows, decoding and training: tasks/mrc
_builtin("encoder", None, EmbedPipeline, "embed")  # answers for any model, through its backbone


# ---------------------------------------------------------------- lookups
def task_kind(name: str) -> TaskKind:
    """The kind a name or alias means ("ner" -> token). ConfigError listing the known names otherwise."""
    for k in KINDS.values():
        if name in k.names:
            return k
    aliases = [a for k in KINDS.values() for a in k.aliases]
    raise ConfigError(f"unknown task kind {name!r}; known: {', '.join(KINDS)} (or {', '.join(aliases)})")


def kind_of_head(head: Optional[str]) -> TaskKind:
    """The kind a model with this head task answers (None: encoder)."""
    for k in KINDS.values():
        if k.head == head:
            return k
    raise ConfigError(f"no task kind has the head {head!r}; heads: {', '.join(k.head for k in KINDS.values() if k.head)}")


def table_kind(name: str) -> TaskKind:
    """The kind a task table row's kind (TaskSpec.kind, `--kind`, head.finetune.kind) names."""
    for k in KINDS.values():
        if name in k.table_kinds:
            return k
    raise ConfigError(f"unknown task table kind {name!r}; known: {', '.join(table_kinds())}")


def table_kinds() -> list[str]:
    """Every kind the task table can fine-tune, as it spells them (single, pair, regression, token)."""
    return [t for k in KINDS.values() for t in k.table_kinds]


def pipeline_names() -> list[str]:
    """The pipelines' names (classification, ner, fill-mask, mrc, embed), each once."""
    return list(dict.fromkeys(k.pipeline.task for k in KINDS.values()))


def pipeline_kind(name: str) -> TaskKind:
    """The kind a `pipeline(task)` name means: a pipeline's name (its first kind) or a kind's alias. A head's
    own name that no pipeline has ("token", "span") is not a pipeline name."""
    for k in KINDS.values():
        if name == k.pipeline.task or name in k.aliases:
            return k
    names = pipeline_names()
    more = [a for k in KINDS.values() for a in k.aliases if a not in names]
    raise ConfigError(f"unknown pipeline task {name!r}; valid: {', '.join(names)} (or {', '.join(more)})")


def endpoints() -> list[str]:
    """The HTTP endpoints' names, each once, in the order of their kinds."""
    return list(dict.fromkeys(k.endpoint for k in KINDS.values()))


def endpoint_kind(endpoint: str) -> TaskKind:
    """The kind behind /v1/<endpoint> (its first kind: classify -> classification)."""
    for k in KINDS.values():
        if k.endpoint == endpoint:
            return k
    raise ConfigError(f"unknown endpoint {endpoint!r}; known: {', '.join(endpoints())}")


def heads_of(pipeline_class: type) -> list[str]:
    """The heads a pipeline answers with (none listed: any model, through its backbone)."""
    return [k.head for k in KINDS.values() if k.pipeline is pipeline_class and k.head is not None]


# ---------------------------------------------------------------- pipelines
def pipeline(task: Optional[str] = None, model=None, *, batch_size: int = 32, int8: bool = False,
             **options) -> Pipeline:
    """A pipeline for `task` on `model` (a model directory, or a model from `bertfam.from_pretrained`).

    task None: the model's own head decides (an encoder without a head gives "embed"). Aliases in the
    transformers style are accepted ("text-classification", "token-classification", "question-answering",
    "feature-extraction"). MRC options: max_length, doc_stride (default: the model's training windows).
    int8: quantize the model (in place) for CPU inference (modeling/int8.py); off by default, an int8
    checkpoint is int8 anyway."""
    if model is None:
        raise ConfigError("pipeline() needs model= (a model directory or a loaded model)")
    if isinstance(model, str):
        from ..checkpoint import from_pretrained

        model = from_pretrained(model)
    head = model.config.head.task
    cls = (pipeline_kind(task) if task is not None else kind_of_head(head)).pipeline
    heads = heads_of(cls)
    if heads and head not in heads:
        raise ConfigError(f"a {cls.task} pipeline needs a {' or '.join(heads)} head; this model has "
                          f"{'no head' if head is None else 'a ' + head + ' head'}"
                          + (f" (its pipeline is {kind_of_head(head).pipeline.task!r})" if head is not None else ""))
    return cls.create(model, batch_size=batch_size, int8=int8, **options)
