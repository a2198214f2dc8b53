"""Fine-tuning, evaluation and prediction for every task in the task table (library entry points): one
config per job and one function that runs it.

    from bertfam.runners.finetune import FinetuneRunConfig, run_finetune
    cfg = FinetuneRunConfig(task="sst2", model="path/to/model", train_file="train.tsv", dev="dev.tsv",
                            out="runs/sst2", max_length=64, train=FinetuneRunConfig.default_train(lr=3e-5))
    summary = run_finetune(cfg)

- `run_finetune(FinetuneRunConfig)`: fine-tune one task (a row of the task table, or `custom`);
- `run_glue(GlueRunConfig)`: every GLUE task of a directory, one table beside the BERT paper's numbers;
- `run_evaluate(EvaluateConfig)` / `run_predict(PredictConfig)`: a fine-tuned directory on a data file.
`FinetuneOptions` holds what the two training jobs share (how each task is trained, the trainer's fields).

The fine-tuned directory is a normal model directory (config.json with the task recorded in
head.finetune, a `config.FinetuneSettings`; weights = the best dev checkpoint; tokenizer), training_info.json
(the run: data files, sizes, steps, score) plus eval_results.json and dev_predictions.*; evaluating and
predicting need only that directory and a data file.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import random
from dataclasses import dataclass, field
from typing import ClassVar, Optional, Sequence, Union

from ..checkpoint import from_pretrained, load_config, read_weights
from ..config import CustomTaskSettings, FinetuneSettings, check_max_length, fit_max_length
from ..data.labelled import Example
from ..data.splits import dev_split
from ..errors import ConfigError, DataError
from ..modeling.optimize import optimize_for_inference
from ..tasks.inputs import InputBuilder, collect_labels, gold, lengths, score
from ..tasks.kinds import table_kinds
from ..tasks.table import TaskSpec, custom_task, get_task
from ..training import TrainConfig, Trainer
from ..utils import atomic_write, atomic_write_text
from .options import RunOptions

log = logging.getLogger("bertfam")
METRIC_SCALE = "0-100"  # every metric x 100 (evaluation/metrics.py), as the GLUE/CLUE leaderboards; results say so


@dataclass(kw_only=True)
class FinetuneOptions(RunOptions):
    """How a task is fine-tuned, what `FinetuneRunConfig` and `GlueRunConfig` share: the run's own fields and
    its trainer's (`train`; each task's run sets its out_dir, the metric it selects on and save_final). Flat
    mappings (`from_dict`) may name train.checkpoints `save_checkpoints`."""

    TRAIN_DEFAULTS: ClassVar[dict] = {"epochs": 3, "group_by_length": True}
    TRAIN_ALIASES: ClassVar[dict] = {"save_checkpoints": "checkpoints"}

    max_length: int = FinetuneSettings.max_length
    dev_ratio: float = 0.1  # carved from train when no dev file is given
    max_train: Optional[int] = None  # use a random subset of this many training examples
    # dev examples evaluated (a random subset); default: a dev split carved from a --max-train subset stays in
    # proportion to it (dev_ratio of max_train), so that evaluating does not outweigh training
    max_eval: Optional[int] = None
    freeze_word_embeddings: bool = False  # e.g. a 250k-row multilingual vocabulary: skip its gradients
    # the embeddings and the first N (distinct) encoder layers are not trained: a small task set (a few hundred
    # pairs) moves only the top of a pretrained encoder, backward stops at layer N (faster), and the trained
    # part alone is what differs from the base model
    freeze_layers: int = 0
    # the classification head's input (HeadConfig.classifier_pooling: pooler, cls_dense, mean); None: the
    # base model's own
    classifier_pooling: Optional[str] = None
    kg: Optional[Sequence[str]] = None  # K-BERT knowledge graph files (.spo)
    resume: bool = False  # continue from the latest checkpoint under out/checkpoints
    overwrite_output_dir: bool = False  # replace the run in a non-empty out (else refused: training/rundir.py)
    # the trainer's fields (its seed also draws the dev split, the training subset and a new head);
    # train.checkpoints False: no out/checkpoints, the final model (+ best/) only
    train: TrainConfig = field(default_factory=lambda: FinetuneOptions.default_train())


@dataclass(kw_only=True)
class FinetuneRunConfig(FinetuneOptions):
    """Fine-tune `model` on the task `task` (a task-table name, or "custom": `custom` names the file's columns,
    `kind` what is predicted, default pair with two text columns, else single; `labels` the label list,
    default those in train), select on `dev` (None: dev_ratio carved from `train_file`), save to `out`."""

    task: str
    model: str  # model directory (bertfam or Hugging Face)
    train_file: str
    out: str
    dev: Optional[str] = None
    kind: Optional[str] = None
    custom: Optional[CustomTaskSettings] = None
    labels: Optional[Sequence[str]] = None

    def __post_init__(self) -> None:
        if isinstance(self.custom, dict):  # to_dict() writes it as a mapping
            try:
                self.custom = CustomTaskSettings.from_dict(self.custom, "custom")
            except ConfigError as e:  # its type checks name the field where a model records it: here, custom
                raise ConfigError(str(e).replace(CustomTaskSettings.WHERE, "custom", 1)) from None


@dataclass(kw_only=True)
class GlueRunConfig(FinetuneOptions):
    """Fine-tune and evaluate `model` on every GLUE task (or those of `tasks`) found under `data`, each into
    out/TASK; test submissions to out/submission(.zip); the table to out/results.txt."""

    model: str
    data: str  # the GLUE directory (CoLA/, SST-2/, MRPC/, ...)
    out: str
    tasks: Optional[Sequence[str]] = None  # default: GLUE_ORDER


@dataclass
class EvaluateConfig:
    """Score the fine-tuned `model` on the labelled file `data` (eval_results.json and the predictions to `out`
    when given). None: the model's own setting (head.finetune: task, K-BERT graphs, max_length); int8: run
    it quantized (modeling/int8.py)."""

    model: str
    data: str
    task: Optional[str] = None
    out: Optional[str] = None
    kg: Optional[Sequence[str]] = None
    max_length: Optional[int] = None  # more than the model's positions is clamped to them (as embed)
    batch_size: int = 64
    int8: bool = False


@dataclass
class PredictConfig:
    """Predict labels for the (possibly unlabelled) file `data` with the fine-tuned `model`, into the directory
    `out`. The other fields as EvaluateConfig's."""

    model: str
    data: str
    out: str
    task: Optional[str] = None
    kg: Optional[Sequence[str]] = None
    max_length: Optional[int] = None
    batch_size: int = 64
    int8: bool = False


# ---------------------------------------------------------------------- helpers
def finetune_task(cfg: FinetuneRunConfig) -> TaskSpec:
    """The TaskSpec cfg trains: its task-table row, or for "custom" the one of cfg.custom's columns."""
    if cfg.task != "custom":
        if cfg.custom is not None or cfg.kind or cfg.labels:
            raise ConfigError(f"custom, kind and labels are for task custom, not {cfg.task}")
        return get_task(cfg.task)
    c = cfg.custom or CustomTaskSettings()  # the kind's reader says which columns it needs
    kind = cfg.kind or ("pair" if len(c.text_cols) == 2 else "single")
    return custom_spec(kind, c, list(cfg.labels) if cfg.labels else None)


def task_from_config(cfg) -> TaskSpec:
    """The task a fine-tuned directory was trained for (config.json head.finetune)."""
    ft = cfg.head.finetune
    if ft is None:
        raise ConfigError("this model directory was not fine-tuned by bertfam (config.json has no "
                          "head.finetune); give --task")
    if ft.task == "custom":
        return custom_spec(ft.kind, ft.custom or CustomTaskSettings(), cfg.head.labels or None)
    return get_task(ft.task)


def custom_kinds() -> list[str]:
    """The kinds a custom task can be (`finetune --kind`): single, pair, regression, token."""
    return table_kinds()


def custom_spec(kind: str, c: CustomTaskSettings, labels: Optional[list] = None) -> TaskSpec:
    """The TaskSpec of a custom task (`--task custom`, or head.finetune.custom of a fine-tuned model).
    ConfigError for a kind or columns the task cannot be read with."""
    return custom_task(c.format, kind, c.text_cols, c.label_col, labels, c.header)


def split_train_dev(examples: list, ratio: float, seed: int) -> tuple[list, list]:
    """A seeded random dev split carved from the training examples (at least one; both parts in file order)."""
    if not 0 < ratio < 1:
        raise ConfigError(f"dev ratio must be in (0, 1), got {ratio}")
    if len(examples) < 2:
        raise DataError("need at least 2 training examples to carve a dev split")
    return dev_split(examples, ratio, seed, min_dev=1)


def _known_labels_only(examples: list, spec: TaskSpec, labels: list, what: str) -> list:
    """Dev/test examples whose gold label the model cannot output are reported and left out."""
    if not spec.task_kind.targets.named or not labels:  # a score: every gold value is one the model can give
        return examples
    ok = set(labels)
    keep = [ex for ex in examples if (ex.tags is None or set(ex.tags) <= ok) and (ex.label is None or ex.label in ok)]
    if len(keep) < len(examples):
        log.warning("%s: %d examples have labels unseen in training and are left out", what, len(examples) - len(keep))
    if not keep:
        raise DataError(f"{what}: no example with a label the model knows")
    return keep


def _kbert_inputs(tokenizer, kg_paths, max_length):
    if not kg_paths:
        return None
    from ..knowledge import KBertInputBuilder, KnowledgeGraph

    kg = KnowledgeGraph.load(list(kg_paths), max_entities=2)
    return KBertInputBuilder(tokenizer, kg, max_length)


def _build_reporting_kbert(builder: InputBuilder, examples: list, what: str) -> list:
    """builder.build(examples), plus one console line on how much knowledge K-BERT injected: a graph
    whose subjects never match the segmented text trains plain BERT without any other sign."""
    enc = builder.kbert
    if getattr(enc, "kg", None) is None or not hasattr(enc, "stats"):  # no graph, or another encoder
        return builder.build(examples)
    keys = ("sentences", "sentences_with_entities", "injected_entities", "dropped_entities")
    before = {k: enc.stats[k] for k in keys}
    inputs = builder.build(examples)
    n = {k: enc.stats[k] - before[k] for k in keys}
    logging.getLogger("bertfam.progress").info(
        "K-BERT %s: %d sentences, %d with at least one injected entity, %d entities injected (%d left out: "
        "no room within max_length)", what, n["sentences"], n["sentences_with_entities"], n["injected_entities"],
        n["dropped_entities"])
    return inputs


# ---------------------------------------------------------------------- fine-tune
def run_finetune(cfg: FinetuneRunConfig) -> dict:
    """Fine-tune cfg.model on cfg.train_file, select on cfg.dev (or a split carved from it), save to cfg.out;
    returns what out/eval_results.json holds, with "written" (what the run wrote) on the main process."""
    from ..training.distributed import is_main_process
    from ..training.rundir import describe_run_dir, link_duplicate_weights, prepare_run_dir

    spec = finetune_task(cfg)  # a task that cannot be read is refused before anything is written
    out = cfg.out
    if is_main_process():  # one process decides (and, with overwrite, removes), before anything is written
        prepare_run_dir(out, resume=cfg.resume, overwrite=cfg.overwrite_output_dir, source=cfg.model)
    check_max_length(load_config(cfg.model)[0], cfg.max_length)  # as pretrain: refused, not clamped
    train_ex, dev_ex, dev_note = _finetune_examples(cfg, spec)
    labels = collect_labels(spec, train_ex)
    dev_ex = _known_labels_only(dev_ex, spec, labels, cfg.dev or "dev split")
    info = {"runs": [{"command": "finetune", "task": spec.name, "base_model": cfg.model, "train": cfg.train_file,
                      "dev": dev_note}]}
    if cfg.resume:
        _check_resumable(out, spec, labels)
    model = _finetune_model(cfg, spec, labels, info, label_descriptions(train_ex, labels))
    builder = InputBuilder(model.tokenizer, spec, labels, cfg.max_length,
                           _kbert_inputs(model.tokenizer, cfg.kg, cfg.max_length))
    train_inputs = _build_reporting_kbert(builder, train_ex, "train")
    dev_inputs = _build_reporting_kbert(builder, dev_ex, "dev")

    kept: dict = {}  # predictions of the best evaluation so far (same rule as the trainer: strictly better)

    def eval_fn(m) -> dict:
        names = builder.label_names(builder.predict(m, dev_inputs, batch_size=2 * cfg.train.batch_size))
        metrics = score(spec, names, gold(dev_ex, spec))
        if "metrics" not in kept or metrics[spec.headline] > kept["metrics"][spec.headline]:
            kept.update(names=names, metrics=metrics)
        return metrics

    tc = dataclasses.replace(cfg.train, out_dir=out, metric_for_best=spec.headline, greater_is_better=True,
                             save_final=cfg.train.checkpoints)
    trainer = Trainer(model.train(), tc, train_inputs, builder.collate, eval_fn=eval_fn, lengths=lengths(train_inputs),
                      tokenizer=model.tokenizer)
    summary = trainer.train(resume_from=out if cfg.resume else None)
    best_here = "names" in kept and kept["metrics"][spec.headline] == summary["best"]  # not a resumed run's older best
    if _keep_best(model, out) and best_here:  # the best evaluation's predictions are those of out/best
        names, metrics = kept["names"], kept["metrics"]
    else:
        names = builder.label_names(builder.predict(model, dev_inputs, batch_size=2 * cfg.train.batch_size))
        metrics = score(spec, names, gold(dev_ex, spec))
    result = {"task": spec.name, "metric": spec.headline, "value": metrics[spec.headline], "scale": METRIC_SCALE,
              "metrics": metrics,
              "n_train": len(train_ex), "n_dev": len(dev_ex), "dev": dev_note, "steps": summary["steps"],
              "train_seconds": round(summary["elapsed_s"], 1), "best_during_training": summary["best"]}
    info["runs"][-1].update(n_train=len(train_ex), n_dev=len(dev_ex), steps=summary["steps"],
                            metric=spec.headline, value=metrics[spec.headline])
    model.config.head.info = info
    model.save_pretrained(out)  # config.json + training_info.json (the run above)
    write_predictions(os.path.join(out, "dev_predictions"), spec, dev_ex, names)
    atomic_write_text(os.path.join(out, "eval_results.json"), json.dumps(result, indent=2, ensure_ascii=False))
    if is_main_process():
        link_duplicate_weights(out)  # best/ (and a last-step checkpoint) hold the model's bytes: links, not copies
        result["written"] = describe_run_dir(out)
    return result


def _finetune_examples(cfg: FinetuneRunConfig, spec: TaskSpec) -> tuple[list, list, str]:
    """(training examples, dev examples, where dev comes from): the files read, dev carved from train when
    there is no dev file, both cut to max_train / max_eval (seeded draws)."""
    seed = cfg.train.seed
    train_ex = spec.read(cfg.train_file)
    if cfg.dev:
        dev_ex = spec.read(cfg.dev)
        dev_note = cfg.dev
    else:
        train_ex, dev_ex = split_train_dev(train_ex, cfg.dev_ratio, seed)
        dev_note = f"{int(cfg.dev_ratio * 100)}% carved from {os.path.basename(cfg.train_file)} (seed {seed})"
    if cfg.max_train and len(train_ex) > cfg.max_train:
        train_ex = random.Random(seed).sample(train_ex, cfg.max_train)
    max_eval = cfg.max_eval
    if max_eval is None and cfg.max_train and not cfg.dev:  # the carved split follows the subset's size
        max_eval = max(1, int(round(cfg.max_train * cfg.dev_ratio)))
    if max_eval and len(dev_ex) > max_eval:
        dev_note += f", {max_eval} of its {len(dev_ex)} examples"
        dev_ex = [dev_ex[i] for i in sorted(random.Random(seed + 1).sample(range(len(dev_ex)), max_eval))]
    _need_labels(train_ex, spec, cfg.train_file)
    _need_labels(dev_ex, spec, cfg.dev or cfg.train_file)
    return train_ex, dev_ex, dev_note


def _finetune_model(cfg: FinetuneRunConfig, spec: TaskSpec, labels: list, info: dict, descriptions: dict):
    """The base model with the task's new head (seeded by train.seed), its record (head.finetune) and the
    layers cfg freezes."""
    settings = FinetuneSettings(task=spec.name, kind=spec.kind, max_length=cfg.max_length,
                                kg=list(cfg.kg) if cfg.kg else None,
                                custom=(CustomTaskSettings.from_dict(spec.extra) if spec.suite == "custom"
                                        and spec.extra else None))
    head_kw = {"labels": labels, "num_labels": max(1, len(labels)), "finetune": settings, "info": info,
               "label_descriptions": descriptions}
    if cfg.classifier_pooling is not None:
        head_kw["classifier_pooling"] = cfg.classifier_pooling
    model = from_pretrained(cfg.model, task=spec.head, seed=cfg.train.seed, dequantize=True, **head_kw)
    if cfg.freeze_word_embeddings:
        model.backbone.embeddings.word.weight.requires_grad_(False)
    if cfg.freeze_layers:
        freeze_bottom(model, cfg.freeze_layers)
    return model


def freeze_bottom(model, n: int) -> None:
    """requires_grad False for the embeddings and the first n distinct encoder layers."""
    layers = model.backbone.encoder.layers
    if not 0 <= n <= len(layers):
        raise ConfigError(f"freeze_layers={n}: the model has {len(layers)} distinct encoder layers")
    for module in [model.backbone.embeddings, *layers[:n]]:
        module.requires_grad_(False)


def _check_resumable(out: str, spec: TaskSpec, labels: list) -> None:
    """--resume into a run of another task, or of other labels, would fail on the head's shapes deep in
    loading: say what the directory holds instead."""
    from ..training.trainer import latest_checkpoint

    ckpt = latest_checkpoint(out)  # CheckpointError naming the directory when it holds none
    cfg = load_config(ckpt)[0]
    ft = cfg.head.finetune
    if ft is not None and ft.task != spec.name:
        raise ConfigError(f"--resume: {out} holds a {ft.task} run, not {spec.name}; give --task {ft.task} "
                          "or another --out")
    if cfg.head.labels and list(cfg.head.labels) != list(labels):
        raise ConfigError(f"--resume: {out} was trained on the labels {list(cfg.head.labels)[:6]}, this "
                          f"training file has {list(labels)[:6]}; give another --out")


def label_descriptions(examples: list, labels: list) -> dict:
    """{label: readable name} for the labels the training file names (TNEWS' `label_desc`): predictions
    and the pipelines then say "news_finance", not "104"."""
    known = set(labels)
    return {ex.label: ex.label_desc for ex in examples if ex.label_desc and ex.label in known}


def _need_labels(examples: list, spec: TaskSpec, path: str) -> None:
    unl = sum(1 for ex in examples if spec.task_kind.targets.gold(ex) is None)
    if unl:
        raise DataError(f"{path}: {unl} examples have no label; training and dev files must be labelled")


def _keep_best(model, out: str) -> bool:
    """Load out/best (the best dev checkpoint the trainer kept) into the model."""
    best = os.path.join(out, "best")
    if not os.path.isdir(best):
        return False
    sd, _ = read_weights(best)
    model.load_state_dict(sd, strict=False)
    return True


# ---------------------------------------------------------------------- evaluate / predict
def _load_finetuned(cfg: Union[EvaluateConfig, PredictConfig]):
    """(model, its TaskSpec, an InputBuilder) of a fine-tuned directory, ready to predict."""
    model = optimize_for_inference(from_pretrained(cfg.model), int8=cfg.int8)
    spec = get_task(cfg.task) if cfg.task else task_from_config(model.config)
    if model.task != spec.head:
        raise ConfigError(f"{cfg.model}: has a {model.task!r} head, task {spec.name} needs {spec.head!r}")
    saved = model.config.head.finetune or FinetuneSettings(task=spec.name)  # --task on a model without the record
    L = fit_max_length(model.config, cfg.max_length or saved.max_length)  # as embed: clamped
    kg = cfg.kg or saved.kg
    builder = InputBuilder(model.tokenizer, spec, list(model.config.head.labels), L,
                           _kbert_inputs(model.tokenizer, kg, L))
    return model, spec, builder


def run_evaluate(cfg: EvaluateConfig) -> dict:
    """Score a fine-tuned model on a labelled file: the headline metric and every other, on the 0-100 scale."""
    model, spec, builder = _load_finetuned(cfg)
    examples = spec.read(cfg.data)
    _need_labels(examples, spec, cfg.data)
    examples = _known_labels_only(examples, spec, builder.labels, cfg.data)
    names = builder.label_names(builder.predict(model, builder.build(examples), cfg.batch_size, progress=True))
    metrics = score(spec, names, gold(examples, spec))
    result = {"task": spec.name, "data": cfg.data, "n": len(examples), "metric": spec.headline,
              "value": metrics[spec.headline], "scale": METRIC_SCALE, "metrics": metrics}
    if cfg.out:
        os.makedirs(cfg.out, exist_ok=True)
        atomic_write_text(os.path.join(cfg.out, "eval_results.json"),
                          json.dumps(result, indent=2, ensure_ascii=False))
        write_predictions(os.path.join(cfg.out, "predictions"), spec, examples, names)
    return result


def run_predict(cfg: PredictConfig) -> str:
    """Predict labels for a file. GLUE tasks: `out/TASK.tsv` in the GLUE submission format
    (`index\\tprediction`); others: out/predictions.tsv or .jsonl. Returns the path."""
    model, spec, builder = _load_finetuned(cfg)
    examples = spec.read(cfg.data)
    names = builder.label_names(builder.predict(model, builder.build(examples, with_labels=False), cfg.batch_size,
                                                progress=True))
    os.makedirs(cfg.out, exist_ok=True)
    if spec.suite == "glue":
        from ..data.glue import SUBMISSION_NAME

        return write_predictions(os.path.join(cfg.out, SUBMISSION_NAME[spec.name]), spec, examples, names,
                                 ids=[ex.guid for ex in examples])  # the GLUE server matches its test index
    return write_predictions(os.path.join(cfg.out, "predictions"), spec, examples, names)


def write_predictions(stem: str, spec: TaskSpec, examples: list[Example], names: list,
                      ids: Optional[Sequence[str]] = None) -> str:
    """Sequence tasks: `stem.tsv` with `index\\tprediction` (GLUE submission layout); index = the row's
    0-based position among `examples` unless `ids` are given. Token tasks: `stem.jsonl` in CLUENER layout
    ({id, text, label: {type: {entity: [[start, end_inclusive]]}}}). The layout is the kind's
    (tasks/targets.py: prediction_lines)."""
    ids = range(len(examples)) if ids is None else ids  # not guids: those are source line numbers (from 2)
    suffix, lines = spec.task_kind.targets.prediction_lines(examples, names, ids)
    path = stem + suffix
    atomic_write_text(path, "\n".join(lines) + "\n")
    return path


# ---------------------------------------------------------------------- GLUE
GLUE_ORDER = ["cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli"]


def run_glue(cfg: GlueRunConfig) -> Optional[str]:
    """Fine-tune and evaluate every GLUE task found under cfg.data; write test submissions where a test
    file exists; return (and save as out/results.txt) one table beside the BERT paper's numbers (None on
    a non-main torchrun rank, whose table `bertfam glue` does not print)."""
    from ..training.distributed import is_main_process
    from ..data.glue import find_task_files
    from ..evaluation.glue import results_table

    rows = []
    for task in cfg.tasks or GLUE_ORDER:
        files = find_task_files(cfg.data, get_task(task).name)
        if "train" in files:
            rows += _glue_task(cfg, task, files)
    if not rows:
        raise DataError(f"{cfg.data}: no GLUE task folder with a train file (CoLA/, SST-2/, MRPC/, ...)")
    rows = _merge_earlier_rows(os.path.join(cfg.out, "results.json"), rows)
    _zip_submission(os.path.join(cfg.out, "submission"))
    table = results_table(rows)
    atomic_write_text(os.path.join(cfg.out, "results.txt"), table + "\n")
    atomic_write_text(os.path.join(cfg.out, "results.json"), json.dumps(rows, indent=2, ensure_ascii=False))
    return table if is_main_process() else None


def _glue_task(cfg: GlueRunConfig, task: str, files: dict) -> list[dict]:
    """One GLUE task fine-tuned into out/TASK with cfg's options: its table rows (MNLI: + mismatched dev) and
    its test submissions."""
    from ..data.glue import find_task_files

    tdir, sub = os.path.join(cfg.out, task), os.path.join(cfg.out, "submission")
    shared = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(FinetuneOptions)}
    r = run_finetune(FinetuneRunConfig(**shared, task=task, model=cfg.model, train_file=files["train"],
                                       dev=files.get("dev"), out=tdir))
    note = "dev: " + (os.path.relpath(files["dev"], cfg.data) if "dev" in files else r["dev"])
    rows = [{**r, "note": note}]
    if task == "mnli":  # the same model on the mismatched dev set
        mm = find_task_files(cfg.data, "mnli-mm")
        if "dev" in mm:
            e = run_evaluate(EvaluateConfig(model=tdir, data=mm["dev"], task="mnli-mm"))
            rows.append({"task": "mnli-mm", "metric": e["metric"], "value": e["value"], "n_train": r["n_train"],
                         "n_dev": e["n"], "note": "dev: " + os.path.relpath(mm["dev"], cfg.data)})
        if "test" in mm:
            run_predict(PredictConfig(model=tdir, data=mm["test"], out=sub, task="mnli-mm"))
    if "test" in files:
        run_predict(PredictConfig(model=tdir, data=files["test"], out=sub, task=task))
    return rows


def _merge_earlier_rows(path: str, rows: list[dict]) -> list[dict]:
    """Rows of tasks run earlier into the same out directory (one `--tasks` call per task, each with its
    own budget) stay in the table; a task run again replaces its row. Rows keep GLUE's task order."""
    earlier = []
    if os.path.isfile(path):
        try:
            earlier = json.loads(open(path, encoding="utf-8").read())
        except ValueError:
            raise DataError(f"{path}: not JSON (remove it, or use another --out)") from None
    now = {r["task"] for r in rows}
    merged = [r for r in earlier if r.get("task") not in now] + rows
    order = {t: i for i, t in enumerate(GLUE_ORDER + ["mnli-mm"])}
    return sorted(merged, key=lambda r: order.get(r["task"], len(order)))


def _zip_submission(folder: str) -> Optional[str]:
    """folder.zip holding the submission TSVs at its top level, the layout the GLUE server takes."""
    import zipfile

    if not os.path.isdir(folder):
        return None
    names = sorted(n for n in os.listdir(folder) if n.endswith(".tsv"))
    zpath = folder + ".zip"

    def write(tmp: str) -> None:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
            for n in names:
                z.write(os.path.join(folder, n), arcname=n)

    atomic_write(zpath, write)
    return zpath
