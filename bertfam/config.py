"""Model configuration: one dataclass describes every family member.

A family member (BERT, RoBERTa, ALBERT, ERNIE, TinyBERT, K-BERT ...) is a `ModelConfig`
plus, for pre-training, an objective. There is exactly one encoder implementation.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import typing
from dataclasses import dataclass, field
from typing import Any, Optional

from .errors import ConfigError

log = logging.getLogger("bertfam")

ACTIVATIONS = ("gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "relu", "silu", "swish", "tanh")
FAMILIES = ("bert", "roberta", "albert", "ernie", "tinybert", "kbert", "visualbert")
HEAD_TASKS = ("mlm", "pretraining", "classification", "regression", "token", "span")  # head.task values (or None)
ENCODER = "encoder"  # the task `from_pretrained` / `export` name a bare backbone by (head.task None)
LOAD_TASKS = (ENCODER,) + HEAD_TASKS
# The one task vocabulary: the pipeline's and transformers' task names, read as the head that answers them,
# wherever a task is named (`from_pretrained(task=...)`, `export --task`, `pipeline(task)`).
TASK_ALIASES = {"ner": "token", "token-classification": "token", "text-classification": "classification",
                "sentiment-analysis": "classification", "classify": "classification", "mrc": "span",
                "question-answering": "span", "fill-mask": "mlm", "embed": ENCODER, "embeddings": ENCODER,
                "feature-extraction": ENCODER}


def head_task(task: Optional[str]) -> Optional[str]:
    """The head task (a LOAD_TASKS value) a task name means: "ner" -> "token", "fill-mask" -> "mlm" ..."""
    return TASK_ALIASES.get(task, task) if task is not None else None


TRAINING_INFO_FILE = "training_info.json"  # beside config.json: provenance, never read to build or run a model


# -------------------------------------------------------------------- typed task settings
class TypedSettings:
    """Base of the typed task settings below: every field is type-checked on construction (ConfigError
    naming the field, e.g. `head.mrc.max_length`), `from_dict` refuses unknown keys, and each field's default
    is the one default of that setting (callers that take an override use None for "the model's setting")."""

    WHERE = "settings"

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            setattr(self, f.name, _typed(getattr(self, f.name), hints[f.name], f"{self.WHERE}.{f.name}"))
        self.check()

    def check(self) -> None:
        """Range checks after the type checks (subclasses)."""

    def need(self, cond: bool, name: str, what: str) -> None:
        if not cond:
            raise ConfigError(f"{self.WHERE}.{name} must be {what}, got {getattr(self, name)!r}")

    @classmethod
    def from_dict(cls, d, where: Optional[str] = None):
        where = where or cls.WHERE
        if isinstance(d, cls):
            return d
        if not isinstance(d, dict):
            raise ConfigError(f"{where} must be a mapping of {', '.join(f.name for f in dataclasses.fields(cls))}, "
                              f"got {d!r}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ConfigError(f"{where}: unknown field(s) {', '.join(unknown)}")
        return cls(**d)


def _typed(v: Any, hint: Any, where: str) -> Any:
    """v checked against a field's type hint (int, float, bool, str, list[X], Optional[X], a TypedSettings class);
    ints are accepted for floats, nothing else is converted."""
    if typing.get_origin(hint) is typing.Union:
        if v is None:
            return None
        (hint,) = [a for a in typing.get_args(hint) if a is not type(None)]
    if isinstance(hint, type) and issubclass(hint, TypedSettings):
        return hint.from_dict(v, where)
    if typing.get_origin(hint) is list:
        if not isinstance(v, (list, tuple)):
            raise ConfigError(f"{where} must be a list, got {v!r}")
        (item,) = typing.get_args(hint)
        return [_typed(x, item, f"{where}[{i}]") for i, x in enumerate(v)]
    if hint is float:
        if isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v):
            return float(v)
        raise ConfigError(f"{where} must be a number, got {v!r}")
    names = {int: "an integer", bool: "true or false", str: "a string"}
    if hint in names:
        if isinstance(v, hint) and not (hint is int and isinstance(v, bool)):
            return v
        raise ConfigError(f"{where} must be {names[hint]}, got {v!r}")
    if hint is dict:
        if isinstance(v, dict):
            return v
        raise ConfigError(f"{where} must be a mapping, got {v!r}")
    raise TypeError(f"{where}: no check for type {hint!r}")  # a field type this module does not know


@dataclass
class AnswerabilityModel(TypedSettings):
    """A fitted logistic regression of "answerable" on named per-question features (`head.mrc.answerability`;
    the features and the fitting: tasks/mrc/answerability.py): P = sigmoid(coef . (x - mean) / scale +
    intercept), one entry per feature in each list."""

    WHERE = "head.mrc.answerability"

    features: list[str] = field(default_factory=list)
    mean: list[float] = field(default_factory=list)
    scale: list[float] = field(default_factory=list)
    coef: list[float] = field(default_factory=list)
    intercept: float = 0.0

    def check(self) -> None:
        n = len(self.features)
        self.need(n > 0, "features", "a non-empty list of feature names")
        for name in ("mean", "scale", "coef"):
            self.need(len(getattr(self, name)) == n, name, f"a list of {n} numbers (one per feature)")
        self.need(all(s > 0 and math.isfinite(s) for s in self.scale), "scale", "positive numbers")
        self.need(all(math.isfinite(v) for v in self.mean + self.coef + [self.intercept]), "coef",
                  "finite numbers (mean, coef and intercept)")


@dataclass
class MRCSettings(TypedSettings):
    """A span model's reading-comprehension windows, decoding and no-answer rule (`head.mrc`). Each default
    here is the only one: `bertfam mrc train` records the windows it trained with, threshold tuning the
    thresholds (and max_answer_length); MRCPredictor runs with one MRCSettings (the model's, or a copy with
    some fields replaced: `tasks.mrc.settings_of`), and so do the mrc pipeline and `serve`. A span model
    without `head.mrc` (a Hugging Face import) runs with these defaults.

    No-answer rule (`tasks.mrc.answered`): answer iff best span - null score > null_threshold AND
    P(answerable) >= answerable_threshold (a model without the classifier: the first test alone) AND, when
    the model directory holds a question-passage verifier (`verifier`, a directory relative to the model's),
    its relevance score >= verifier_threshold. With `answerability` (a fused model fitted out of fold),
    P(answerable) is that model's probability rather than the reader's classifier's."""

    WHERE = "head.mrc"

    max_length: int = 384  # tokens per window (question + passage)
    doc_stride: int = 128  # tokens of overlap between consecutive windows of a long passage
    max_query_length: int = 64  # question tokens kept
    max_answer_length: int = 64  # longest answer span, tokens
    n_best: int = 20  # candidate spans kept per question
    use_title: bool = True  # the title goes before the passage
    # with use_title and a title: the passage read twice, with and without its title, start/end logits and
    # P(answerable) averaged token by token (predictor.average_reads): two views of one model, an ensemble
    title_ensemble: bool = False
    # keyword queries (no question word: 番石榴汁热量, tasks.mrc.query_form): False = the reader reads them
    # without the title even when use_title (a title restating the query draws a reader to the passage's
    # first lines); the fused answerability model still sees the title
    keyword_use_title: bool = True
    null_threshold: float = 0.0
    answerable_threshold: float = 0.5
    answer_extension: str = "none"  # widen spans to their clause / sentence, or trim: cut at a sentence end (decoding.extend_span)
    keyword_extension: Optional[str] = None  # answer_extension for keyword queries (None: answer_extension)
    # span score - this x share of its characters in the question (decoding.decode)
    question_overlap_penalty: float = 0.0
    length_bonus: float = 0.0  # span score + this x log(1 + its characters): longer spans favoured (decode)
    span_choice: str = "score"  # the answer: the best-scoring span, or "expected_f1": the n-best's consensus (decoding)
    verifier: Optional[str] = None  # a verifier model directory, relative to the model's (tasks.mrc.verifier)
    verifier_threshold: float = -1.0  # verifier score needed (a cosine in [-1, 1], or P in [0, 1]); -1: all pass
    # when set, P(answerable) in the rule is this fused model's (reader signals + question/title/passage match)
    answerability: Optional[AnswerabilityModel] = None

    def check(self) -> None:
        for name in ("max_length", "max_query_length", "max_answer_length", "n_best"):
            self.need(getattr(self, name) > 0, name, "a positive integer")
        self.need(self.doc_stride >= 0, "doc_stride", "a non-negative integer")
        self.need(0.0 <= self.answerable_threshold <= 1.0, "answerable_threshold", "a probability in [0, 1]")
        self.need(self.answer_extension in ("none", "clause", "sentence", "trim"), "answer_extension",
                  "one of none, clause, sentence, trim")
        self.need(self.keyword_extension in (None, "none", "clause", "sentence", "trim"), "keyword_extension",
                  "null or one of none, clause, sentence, trim")
        self.need(-1.0 <= self.verifier_threshold <= 1.0, "verifier_threshold", "a score in [-1, 1]")
        self.need(self.span_choice in ("score", "expected_f1"), "span_choice", "one of score, expected_f1")
        self.need(self.question_overlap_penalty >= 0.0, "question_overlap_penalty", "a non-negative number")
        self.need(self.length_bonus >= 0.0, "length_bonus", "a non-negative number")
        self.need(self.verifier is None or (isinstance(self.verifier, str) and self.verifier.strip() != ""
                                            and not os.path.isabs(self.verifier)),
                  "verifier", "a directory name relative to the model directory")


@dataclass
class CustomTaskSettings(TypedSettings):
    """`bertfam finetune --task custom`: how the user's file is read again by evaluate / predict."""

    WHERE = "head.finetune.custom"

    format: str = "tsv"  # tsv | jsonl
    text_cols: list[str] = field(default_factory=list)  # names, or 0-based numbers as strings
    label_col: Optional[str] = None
    header: bool = True  # TSV with a header row


@dataclass
class FinetuneSettings(TypedSettings):
    """What `bertfam finetune` trained a head for (`head.finetune`): `evaluate` and `predict` need only
    the model directory and a data file. Each default here is the only one (runners.finetune's configs
    and the commands take theirs from it)."""

    WHERE = "head.finetune"

    task: str = ""  # task-table name (sst2, tnews, cluener ...) or "custom"
    kind: str = "single"  # single | pair | regression | token
    max_length: int = 128  # tokens per example, in training and (by default) in evaluate / predict
    kg: Optional[list[str]] = None  # K-BERT knowledge-graph files (.spo)
    custom: Optional[CustomTaskSettings] = None  # task "custom" only

    def check(self) -> None:
        self.need(bool(self.task), "task", "a task name")
        self.need(self.max_length > 0, "max_length", "a positive integer")


INT8_MODULES = ("attn.qkv", "attn.out", "ffn_in", "ffn_out", "embeddings.word")  # what an int8 model quantizes
INT8_PROJECTIONS = INT8_MODULES[:4]  # each encoder layer's projections: all four in a static-int8 model
# dynamic-int8: activations quantized per batch at run time (modeling/int8.py); static-int8: with a scale and
# zero point per projection input calibrated once on real inputs (modeling/int8_static.py); weight-int8: int8
# storage only, from_pretrained turns the weights back into float32 (the rounding stays) and the model computes
# in float (a checkpoint of about a quarter of the float32 size without quantized activations)
QUANTIZATION_METHODS = ("dynamic-int8", "static-int8", "weight-int8")
STORAGE_ONLY_METHODS = ("weight-int8",)  # loaded as float modules


@dataclass
class QuantizationConfig(TypedSettings):
    """An int8 checkpoint's record (`quantization` in config.json; absent in a float checkpoint). It builds the
    model: from_pretrained applies the same int8 swap (`modeling/int8.py`) before it loads the tensors, so the
    int8 weights land in int8 modules. `bertfam quantize` writes it (`--calibrate FILE`: static-int8).

    modules: every encoder layer's fused QKV, attention output, FFN in and FFN out projections, and the word
    embeddings ("embeddings.word": int8 rows, which the tied MLM decoder then multiplies with in int8 too).
    Everything else (positions, token types, LayerNorms, biases, pooler, heads) stays float32."""

    WHERE = "quantization"

    method: str = "dynamic-int8"  # QUANTIZATION_METHODS: how activations are quantized (weights: the same)
    weights: str = "per-channel symmetric"  # one scale per output channel / row: max|w| / 127, zero point 0
    modules: list[str] = field(default_factory=lambda: list(INT8_MODULES))

    def check(self) -> None:
        self.need(self.method in QUANTIZATION_METHODS, "method", " or ".join(map(repr, QUANTIZATION_METHODS)))
        self.need(self.weights == "per-channel symmetric", "weights", "'per-channel symmetric'")
        unknown = [m for m in self.modules if m not in INT8_MODULES]
        self.need(bool(self.modules) and not unknown, "modules",
                  f"a non-empty list of {', '.join(INT8_MODULES)}")
        # a static layer fuses its four projections with each other (GELU, residual adds): all or none
        self.need(self.method != "static-int8" or all(p in self.modules for p in INT8_PROJECTIONS), "modules",
                  f"a list holding all of {', '.join(INT8_PROJECTIONS)} for static-int8")


CLASSIFIER_POOLING = ("pooler", "cls_dense", "mean")


@dataclass
class HeadConfig:
    """What sits on top of the backbone. Saved inside config.json under "head"; `info` is saved apart, in
    training_info.json beside config.json."""

    task: Optional[str] = None  # None | mlm | pretraining | classification | regression | token | span
    num_labels: int = 2
    labels: list[str] = field(default_factory=list)  # label names, index = class id
    # label -> readable name, where the data has one (TNEWS "104" -> "news_finance"); pipelines answer with it
    label_descriptions: dict[str, str] = field(default_factory=dict)
    # "pooler": dropout + linear on the pooled [CLS] (BERT/ALBERT);
    # "cls_dense": dense + tanh + linear on the [CLS] hidden state (RoBERTa's head);
    # "mean": dropout + linear on the mean of the real tokens' states (e5, sentence-transformers)
    classifier_pooling: str = "pooler"
    classifier_dropout: Optional[float] = None
    pair_objective: Optional[str] = None  # pretraining: "nsp" | "sop" | None (MLM only)
    answerability: bool = True  # span head: 2-way answerable classifier on [CLS]
    mrc: Optional[MRCSettings] = None  # span head: windows, decoding, thresholds (None: MRCSettings defaults)
    finetune: Optional[FinetuneSettings] = None  # the task `bertfam finetune` trained this head for
    # provenance (training data, tuning results, demo questions seen): training_info.json, not config.json;
    # not compared (two configs that build and run the same model are equal)
    info: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.classifier_pooling not in CLASSIFIER_POOLING:
            raise ConfigError(f"head.classifier_pooling {self.classifier_pooling!r} not in {', '.join(CLASSIFIER_POOLING)}")
        if self.mrc is not None:
            self.mrc = MRCSettings.from_dict(self.mrc)
        if self.finetune is not None:
            self.finetune = FinetuneSettings.from_dict(self.finetune)
        if not isinstance(self.info, dict):
            raise ConfigError(f"head.info must be a mapping, got {self.info!r}")

    @property
    def mrc_settings(self) -> MRCSettings:
        """head.mrc, or the defaults when the model has none recorded."""
        return self.mrc if self.mrc is not None else MRCSettings()

    def side_directories(self) -> list[tuple[str, bool]]:
        """(directory, required) beside config.json that belong to this head and travel with the model (saved,
        converted, quantized along): an MRC model's verifier (head.mrc.verifier) and, where it has one, the
        fine-tuned delta `mrc build-verifier` builds it from (VERIFIER-delta, optional)."""
        name = self.mrc_settings.verifier if self.task == "span" else None
        return [(name, True), (name + "-delta", False)] if name else []


def read_training_info(model_dir: str) -> dict:
    """training_info.json of a model directory ({} when it has none)."""
    path = os.path.join(model_dir, TRAINING_INFO_FILE)
    return read_json(path) if os.path.isfile(path) else {}


def with_training_info(cfg: "ModelConfig", model_dir: str) -> "ModelConfig":
    """cfg with model_dir's training_info.json in head.info."""
    info = read_training_info(model_dir)
    if info:
        cfg.head.info = {**cfg.head.info, **info}
    return cfg


@dataclass
class ModelConfig:
    """Architecture of the one bertfam encoder.

    ALBERT: set `embedding_size` < `hidden_size` (factorized embeddings) and `num_hidden_groups`
    (cross-layer sharing: layer i runs group i * groups // layers). RoBERTa: `position_offset`
    = pad_token_id + 1 and positions skip padding. ERNIE 3.0: `use_task_id`.
    """

    family: str = "bert"
    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    embedding_size: Optional[int] = None  # None: equal to hidden_size (no factorization)
    num_hidden_groups: Optional[int] = None  # None: one group per layer (no sharing)
    inner_group_num: int = 1  # layers inside one shared group (ALBERT)
    position_offset: int = 0  # RoBERTa: pad_token_id + 1, positions count only real tokens
    use_task_id: bool = False  # ERNIE 3.0 task-type embeddings
    task_type_vocab_size: int = 3
    head: HeadConfig = field(default_factory=HeadConfig)
    quantization: Optional[QuantizationConfig] = None  # an int8 checkpoint's record; None: float weights

    def __post_init__(self) -> None:
        if isinstance(self.head, dict):
            self.head = HeadConfig(**known_fields(HeadConfig, self.head, "head"))
        if self.quantization is not None:
            self.quantization = QuantizationConfig.from_dict(self.quantization)
        self.validate()

    # ---------------------------------------------------------------- derived
    @property
    def emb_size(self) -> int:
        return self.embedding_size or self.hidden_size

    @property
    def groups(self) -> int:
        return self.num_hidden_groups or self.num_hidden_layers

    @property
    def max_sequence_length(self) -> int:
        """Longest input the position table holds (RoBERTa's table starts after its padding rows)."""
        return self.max_position_embeddings - self.position_offset

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def validate(self) -> None:
        def need(cond: bool, msg: str) -> None:
            if not cond:
                raise ConfigError(f"config: {msg}")

        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                     "intermediate_size", "max_position_embeddings"):
            v = getattr(self, name)
            need(isinstance(v, int) and v > 0, f"{name} must be a positive integer, got {v!r}")
        need(self.hidden_size % self.num_attention_heads == 0,
             f"hidden_size {self.hidden_size} is not a multiple of num_attention_heads {self.num_attention_heads}")
        need(self.hidden_act in ACTIVATIONS, f"hidden_act {self.hidden_act!r} not in {ACTIVATIONS}")
        need(self.type_vocab_size >= 0, "type_vocab_size must be >= 0")
        need(self.num_hidden_layers % self.groups == 0,
             f"num_hidden_layers {self.num_hidden_layers} not divisible by num_hidden_groups {self.groups}")
        need(self.inner_group_num >= 1, "inner_group_num must be >= 1")
        need(0 <= self.pad_token_id < self.vocab_size, f"pad_token_id {self.pad_token_id} outside the vocabulary")
        need(self.position_offset >= 0, "position_offset must be >= 0")
        need(self.head.task is None or self.head.task in HEAD_TASKS,
             f"head task {self.head.task!r} not in {', '.join(HEAD_TASKS)}")

    # ---------------------------------------------------------------- json
    def to_dict(self) -> dict:
        """config.json's mapping (head.info is not in it: `save` writes it to training_info.json)."""
        d = dataclasses.asdict(self)
        d["head"].pop("info", None)
        if d["quantization"] is None:  # a float checkpoint's config.json is as before
            del d["quantization"]
        d["bertfam_config_version"] = 1
        return d

    @classmethod
    def from_dict(cls, d: dict, source: str = "config") -> "ModelConfig":
        d = dict(d)
        d.pop("bertfam_config_version", None)
        if isinstance(d.get("head"), dict) and "extra" in d["head"]:  # before the typed task settings
            raise old_format(source, "head.extra")
        try:
            return cls(**known_fields(cls, d, source))
        except TypeError as e:  # wrong value types that dataclass construction rejects
            raise ConfigError(f"{source}: {e}") from None
        except ConfigError as e:
            msg = str(e)  # a head or quantization field's error names the field: say which file too
            if not msg.startswith(("head", "quantization")):
                raise
            raise ConfigError(f"{source}: {msg}") from None

    def save(self, path: str) -> None:
        """config.json at `path` and, beside it, training_info.json with head.info (each atomically). A
        config.json saved without info removes a training_info.json left beside it: it described another
        model."""
        from .utils import atomic_write_text

        info_path = os.path.join(os.path.dirname(os.path.abspath(path)), TRAINING_INFO_FILE)
        if self.head.info:
            atomic_write_text(info_path, json.dumps(self.head.info, indent=2, ensure_ascii=False, default=str) + "\n")
        atomic_write_text(path, json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n")
        if not self.head.info and os.path.basename(path) == "config.json" and os.path.isfile(info_path):
            os.remove(info_path)

    @classmethod
    def load(cls, path: str) -> "ModelConfig":
        """A config.json (with the training_info.json beside it in head.info)."""
        d = read_json(path)
        return with_training_info(cls.from_dict(d, source=path), os.path.dirname(os.path.abspath(path)))

    def replace(self, **kw) -> "ModelConfig":
        return dataclasses.replace(self, **kw)


def fit_max_length(cfg: ModelConfig, max_length: int) -> int:
    """Inference (embed, evaluate, predict): max_length within the model's positions, clamped with one warning
    rather than refused, as MRC windows are: a longer input would index past the position table, and texts
    that fit come out the same either way."""
    limit = cfg.max_sequence_length
    if max_length > limit:
        log.warning("max length %d is more than the model's %d positions; using %d", max_length, limit, limit)
        return limit
    return max_length


def check_max_length(cfg: ModelConfig, max_length: int, what: str = "max_length") -> None:
    """Training (pretrain, finetune): ConfigError when max_length exceeds the model's positions. Refused, not
    clamped: the run's recorded length would not be the one it trained with."""
    if max_length > cfg.max_sequence_length:
        raise ConfigError(f"{what} {max_length} exceeds the model's {cfg.max_sequence_length} positions "
                          f"(max_position_embeddings {cfg.max_position_embeddings})")


def old_format(path: str, what: str, target: Optional[str] = None) -> ConfigError:
    """The one-line error of a file in a format of an older version: the file, what is old in it, and the
    command that rewrites it (`bertfam upgrade`, of `target`: the file's directory unless given)."""
    target = target if target is not None else (os.path.dirname(path) or ".")
    return ConfigError(f"{path}: written by an older version ({what}); run: bertfam upgrade {target}")


def known_fields(cls, d: dict, source: str) -> dict:
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - names)
    if unknown:
        raise ConfigError(f"{source}: unknown field(s) {', '.join(unknown)}")
    return d


def read_json(path: str) -> dict:
    if not os.path.isfile(path):
        raise ConfigError(f"{path}: file not found")
    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(d, dict):
        raise ConfigError(f"{path}: expected a JSON object")
    return d


def read_run_file(path: str) -> dict:
    """The mapping in a JSON or YAML run file (ConfigError naming the file otherwise)."""
    if not path.endswith((".yaml", ".yml")):
        return read_json(path)
    try:
        import yaml
    except ImportError:
        raise ConfigError(f"{path}: YAML run files need PyYAML (pip install pyyaml)") from None
    if not os.path.isfile(path):
        raise ConfigError(f"{path}: file not found")
    with open(path, encoding="utf-8") as f:
        try:
            d = yaml.safe_load(f)
        except yaml.YAMLError as e:
            raise ConfigError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(d, dict):
        raise ConfigError(f"{path}: expected a mapping")
    return d


# -------------------------------------------------------------------- presets
_BERT_SIZES = {  # name: (layers, hidden, heads)  -- Turc et al. 2019 + Devlin et al. 2019
    "bert-tiny": (2, 128, 2),
    "bert-mini": (4, 256, 4),
    "bert-small": (4, 512, 8),
    "bert-medium": (8, 512, 8),
    "bert-base": (12, 768, 12),
    "bert-large": (24, 1024, 16),
}
_ALBERT_SIZES = {  # name: (layers, hidden, heads, intermediate), embedding 128, one shared group
    "albert-base": (12, 768, 12, 3072),
    "albert-large": (24, 1024, 16, 4096),
    "albert-xlarge": (24, 2048, 16, 8192),
    "albert-xxlarge": (12, 4096, 64, 16384),
}
CHINESE_VOCAB_SIZE = 21128


def preset_names() -> list[str]:
    names = list(_BERT_SIZES) + list(_ALBERT_SIZES) + ["roberta-base", "roberta-large",
                                                         "tinybert-4l-312", "tinybert-6l-768", "ernie-base"]
    return names + [n + "-chinese" for n in names if n.startswith(("bert-", "tinybert", "albert-"))]


def preset(name: str, **overrides) -> ModelConfig:
    """A named configuration. `NAME-chinese` swaps in the 21128-piece bert-base-chinese vocabulary."""
    base = name
    kw: dict[str, Any] = {}
    if name.endswith("-chinese"):
        base = name[: -len("-chinese")]
        kw["vocab_size"] = CHINESE_VOCAB_SIZE
    if base in _BERT_SIZES:
        L, H, A = _BERT_SIZES[base]
        cfg = dict(family="bert", num_hidden_layers=L, hidden_size=H, num_attention_heads=A, intermediate_size=4 * H)
    elif base in _ALBERT_SIZES:
        L, H, A, I = _ALBERT_SIZES[base]
        cfg = dict(family="albert", vocab_size=30000, num_hidden_layers=L, hidden_size=H, num_attention_heads=A,
                   intermediate_size=I, embedding_size=128, num_hidden_groups=1, hidden_act="gelu_new",
                   hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, layer_norm_eps=1e-12)
    elif base in ("roberta-base", "roberta-large"):
        L, H, A = (12, 768, 12) if base == "roberta-base" else (24, 1024, 16)
        cfg = dict(family="roberta", vocab_size=50265, num_hidden_layers=L, hidden_size=H, num_attention_heads=A,
                   intermediate_size=4 * H, max_position_embeddings=514, type_vocab_size=1, pad_token_id=1,
                   position_offset=2, layer_norm_eps=1e-5)
    elif base == "tinybert-4l-312":
        cfg = dict(family="tinybert", num_hidden_layers=4, hidden_size=312, num_attention_heads=12,
                   intermediate_size=1200)
    elif base == "tinybert-6l-768":
        cfg = dict(family="tinybert", num_hidden_layers=6, hidden_size=768, num_attention_heads=12,
                   intermediate_size=3072)
    elif base == "ernie-base":  # ERNIE 1.0 / 3.0-base-zh layout (BERT architecture, task-type ids)
        cfg = dict(family="ernie", vocab_size=40000, num_hidden_layers=12, hidden_size=768, num_attention_heads=12,
                   intermediate_size=3072, max_position_embeddings=2048, type_vocab_size=4, use_task_id=True,
                   hidden_act="gelu", hidden_dropout_prob=0.1)
    else:
        raise ConfigError(f"unknown preset {name!r}; known: {', '.join(preset_names())}")
    cfg.update(kw)
    cfg.update(overrides)
    return ModelConfig(**cfg)
