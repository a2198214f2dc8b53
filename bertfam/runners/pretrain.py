"""Pre-training entry point (library): BERT / RoBERTa / ALBERT / ERNIE objectives on the shared Trainer.

An objective is a (masking, pair) composition: bert = token + nsp, roberta = token + none (FULL-SENTENCES,
dynamic masking), albert = token + sop, ernie = ernie knowledge masking + nsp; `masking` and `pair`
override either half (e.g. ERNIE masking + SOP).
"""
from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
from dataclasses import dataclass, field
from typing import ClassVar, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from ..checkpoint import from_pretrained, resolve_config
from ..config import HeadConfig, check_max_length
from ..errors import ConfigError, DataError
from ..modeling import build_model
from ..objectives.collator import PretrainCollator
from ..objectives.masking import IGNORE, MaskingConfig
from ..objectives.pipeline import OBJECTIVES, DataConfig, build_instances, make_masker
from ..tokenization import tokenizer_from
from ..training import TrainConfig, Trainer, TrainerCallback
from ..utils import atomic_write_text
from .options import RunOptions

log = logging.getLogger("bertfam")


@dataclass
class PretrainConfig(RunOptions):
    """A pre-training run: the data and objective fields, and the trainer's (`train`, with out_dir = the run
    directory). Flat mappings (`from_dict`: option names, older pretrain_config.json files) name the run
    directory `out`."""

    TRAIN_DEFAULTS: ClassVar[dict] = {"out_dir": "runs/pretrain", "lr": 1e-4, "warmup_ratio": 0.01}
    TRAIN_ALIASES: ClassVar[dict] = {"out": "out_dir"}

    model_config: str = "bert-mini"  # preset name or JSON file (ignored with init)
    objective: str = "bert"
    pair: Optional[str] = None  # nsp | sop | none (default: from the objective)
    masking: Optional[str] = None  # token | wwm | ernie | span (default: from the objective)
    corpus: Sequence[str] = ()
    data: Optional[str] = None  # an instance cache from `bertfam pretrain-data` (instead of corpus)
    vocab: Optional[str] = None  # vocab.txt or tokenizer directory (default: the init checkpoint's)
    init: Optional[str] = None  # continue pre-training this checkpoint
    resume: Optional[str] = None  # resume an interrupted run (out dir or checkpoint dir)
    overwrite_output_dir: bool = False  # replace the run in a non-empty out (else refused: training/rundir.py)
    max_seq_len: int = 128
    short_seq_prob: float = 0.1
    mask_rate: float = 0.15
    ernie_mix: Sequence[float] = (0.2, 0.4, 0.4)
    span_p: float = 0.2
    eval_every_doc: int = 50
    eval_size: int = 512
    chunk_docs: int = 10_000
    max_line_chars: int = 100_000
    text_field: str = "text"
    # the trainer's fields (its seed also seeds the data and a new model's weights)
    train: TrainConfig = field(default_factory=lambda: PretrainConfig.default_train())

    @property
    def out(self) -> str:
        """The run directory (train.out_dir)."""
        return self.train.out_dir

    def resolved(self) -> tuple[str, str]:
        if self.objective not in OBJECTIVES:
            raise ConfigError(f"objective {self.objective!r} not in {sorted(OBJECTIVES)}")
        m, p = OBJECTIVES[self.objective]
        return self.masking or m, self.pair or p

    def masking_config(self) -> MaskingConfig:
        mcfg = MaskingConfig(strategy=self.resolved()[0], rate=self.mask_rate, ernie_mix=tuple(self.ernie_mix),
                             span_p=self.span_p)
        mcfg.validate()
        return mcfg

    def data_config(self) -> DataConfig:
        masking, pair = self.resolved()
        return DataConfig(corpus=list(self.corpus), pair=pair, masking=self.masking_config(),
                          max_seq_len=self.max_seq_len, short_seq_prob=self.short_seq_prob, seed=self.train.seed,
                          chunk_docs=self.chunk_docs, eval_every_doc=self.eval_every_doc, eval_size=self.eval_size,
                          max_line_chars=self.max_line_chars, text_field=self.text_field)


# ---------------------------------------------------------------- model + tokenizer
def build_pretraining_model(pc: PretrainConfig, tokenizer):
    """A fresh model from a preset / JSON, or the --init checkpoint with a pre-training head."""
    _, pair = pc.resolved()
    pair_obj = None if pair == "none" else pair
    if pc.init:
        model = from_pretrained(pc.init, task="pretraining", load_tokenizer=False, pair_objective=pair_obj,
                                dequantize=True)
        cfg = model.config
    else:
        cfg = resolve_config(pc.model_config)
        if not os.path.isfile(pc.model_config) and cfg.vocab_size != tokenizer.vocab_size:
            cfg = cfg.replace(vocab_size=tokenizer.vocab_size)  # a preset follows the vocabulary
        cfg = dataclasses.replace(cfg, head=HeadConfig(task="pretraining", pair_objective=pair_obj))
        model = build_model(cfg, seed=pc.train.seed)
    if tokenizer.vocab_size > cfg.vocab_size:
        raise ConfigError(f"tokenizer has {tokenizer.vocab_size} entries but the model's vocab_size is "
                          f"{cfg.vocab_size}")
    check_max_length(cfg, pc.max_seq_len, "max_seq_len")
    model.tokenizer = tokenizer
    return model.train()


# ---------------------------------------------------------------- metrics
def _masked(out, batch) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits (N, V), targets (N,)) over the predicted positions."""
    labels = batch["labels"]
    mp = batch.get("masked_positions")
    if mp is not None:
        return out.logits, labels[mp]
    sel = labels.ne(IGNORE)
    return out.logits[sel], labels[sel]


def step_metrics(out, batch) -> dict:
    logits, targets = _masked(out, batch)
    m = {"mlm_acc": float((logits.argmax(-1) == targets).float().mean()) if len(targets) else 0.0}
    if out.pair_logits is not None and "pair_labels" in batch:
        m["pair_acc"] = float((out.pair_logits.argmax(-1) == batch["pair_labels"]).float().mean())
    return m


def make_eval_fn(eval_set, collate, batch_size: int):
    """MLM loss / accuracy / perplexity and NSP/SOP accuracy on the (statically masked) held-out slice."""

    def evaluate(model) -> dict:
        device = next(model.parameters()).device
        nll = hits = n = pair_hits = pair_n = 0.0
        for s in range(0, len(eval_set), batch_size):
            batch = collate([eval_set[i] for i in range(s, min(s + batch_size, len(eval_set)))])
            batch = {k: v.to(device) for k, v in batch.items()}
            out = model(**batch)
            logits, targets = _masked(out, batch)
            nll += float(F.cross_entropy(logits.float(), targets, reduction="sum"))
            hits += float((logits.argmax(-1) == targets).sum())
            n += len(targets)
            if out.pair_logits is not None:
                pair_hits += float((out.pair_logits.argmax(-1) == batch["pair_labels"]).sum())
                pair_n += len(batch["pair_labels"])
        loss = nll / max(n, 1)
        m = {"mlm_loss": loss, "mlm_ppl": math.exp(min(loss, 50.0)), "mlm_acc": hits / max(n, 1)}
        if pair_n:
            m["pair_acc"] = pair_hits / pair_n
        return m

    return evaluate


# ---------------------------------------------------------------- data
def load_data(pc: PretrainConfig, tokenizer, masker):
    """(train dataset, eval dataset or None, lengths)."""
    if pc.data:
        from ..data.instance_cache import InstanceCache, load_split, read_meta

        meta = read_meta(pc.data)
        masking, pair = pc.resolved()
        if meta.get("pair") != pair:
            raise ConfigError(f"{pc.data}: cache was built for pair objective {meta.get('pair')!r}, not {pair!r}")
        if meta.get("max_seq_len", 0) > pc.max_seq_len:
            raise ConfigError(f"{pc.data}: cache has max_seq_len {meta.get('max_seq_len')} > {pc.max_seq_len}")
        train = InstanceCache(pc.data, "train")
        if len(train) == 0:
            raise DataError(f"{pc.data}: the cache holds no training instances")
        return train, load_split(pc.data, "eval"), train.lengths()
    if not pc.corpus:
        raise ConfigError("give --corpus FILES (or --data CACHE_DIR)")
    train, held, _ = build_instances(pc.data_config(), tokenizer, masker)
    return train, held or None, [len(ex["input_ids"]) for ex in train]


# ---------------------------------------------------------------- run
def run_pretraining(pc: PretrainConfig, callbacks: Sequence[TrainerCallback] = ()) -> dict:
    """Pre-train as `pc` says; `callbacks` (bertfam.training.TrainerCallback) observe the training loop."""
    from ..training.distributed import is_main_process
    from ..training.rundir import describe_run_dir, link_duplicate_weights, prepare_run_dir

    if is_main_process():  # first: a --resume of a directory that is not there is "not found", not "give --vocab"
        prepare_run_dir(pc.out, resume=pc.resume, overwrite=pc.overwrite_output_dir, source=pc.init)
    masking, pair = pc.resolved()
    tokenizer = tokenizer_from(pc.vocab, pc.data, pc.init)  # --vocab, else the data cache's, else --init's
    model = build_pretraining_model(pc, tokenizer)
    masker = make_masker(pc.masking_config(), tokenizer, model.config.vocab_size)
    train, held, lengths = load_data(pc, tokenizer, masker)
    collate = PretrainCollator(masker, tokenizer.pad_token_id, pair=pair != "none")
    eval_fn = make_eval_fn(held, collate, pc.train.batch_size) if held is not None else None
    trainer = Trainer(model, pc.train, train, collate, eval_fn=eval_fn, lengths=lengths,
                      step_metrics_fn=step_metrics, tokenizer=tokenizer, callbacks=[*callbacks, _WriteRunConfig(pc)])
    log.info("pre-training %s (masking %s, pair %s): %d instances, %s parameters", pc.objective, masking, pair,
             len(train), f"{model.num_parameters()['total']:,}")
    summary = trainer.train(resume_from=pc.resume)  # summary["already_complete"]: a finished run, left as it was
    summary.update(train_instances=len(train), eval_instances=len(held) if held is not None else 0)
    if is_main_process() and not summary.get("already_complete"):
        link_duplicate_weights(pc.out)  # the last checkpoint's weights are the final model's: one file
        summary["written"] = describe_run_dir(pc.out)
    return summary


def run_pretrain_data(pc: PretrainConfig, dupe_factor: int = 5) -> dict:
    """`bertfam pretrain-data`: write the instances of `pc`'s corpus to the instance cache `pc.out`
    (`dupe_factor` statically masked copies; 0: unmasked, for dynamic masking). Returns the cache's meta,
    with "corpus_stats" (the corpus counts' summary)."""
    from ..data.corpus import CorpusStats
    from ..data.instance_cache import write_cache
    from ..objectives.pipeline import check_nonempty, iter_instances

    if not pc.corpus:
        raise ConfigError("give --corpus FILES")
    tok = tokenizer_from(pc.vocab, pc.data, pc.init)
    dc = pc.data_config()
    stats = CorpusStats()
    counted = {"train": 0}

    def items():
        for split, ex in iter_instances(dc, tok, stats, dupe_factor, make_masker(dc.masking, tok)):
            counted[split] = counted.get(split, 0) + 1
            yield split, ex
        check_nonempty([None] * counted["train"], dc.corpus, stats)

    masking, pair = pc.resolved()
    meta = {"objective": pc.objective, "masking": masking, "pair": pair, "max_seq_len": pc.max_seq_len,
            "dupe_factor": dupe_factor, "mask_rate": pc.mask_rate, "seed": pc.train.seed, "corpus": list(pc.corpus)}
    meta = write_cache(pc.out, items(), meta, static=dupe_factor > 0, tokenizer=tok)
    meta["corpus_stats"] = stats.summary()
    return meta


def run_plot(run_dir: str, out: Optional[str] = None) -> str:
    """`bertfam plot`: the PNG curves (loss, MLM/NSP/SOP accuracy, lr) of a training run's metrics; returns
    the PNG's path (default RUN_DIR/curves.png)."""
    from ..training.curves import plot_run

    return plot_run(run_dir, out)


RUN_CONFIG_FILE = "pretrain_config.json"
# fields that runs of older versions recorded and no run reads any more (`bertfam upgrade` removes them)
RETIRED_FIELDS = ("stop_after_step",)


def old_run_config(d: dict, run_file: bool = False) -> Optional[str]:
    """What makes a saved run config (or, `run_file`, a --config run file, whose flat layout is current) a
    format of an older version, None when nothing does: a flat layout (the trainer's fields beside the run's,
    no "train" section) or a retired field."""
    train = d.get("train")
    retired = [k for k in RETIRED_FIELDS if k in d or (isinstance(train, dict) and k in train)]
    if retired:
        return f"retired field(s) {', '.join(retired)}"
    if not run_file and not isinstance(train, dict):
        return "the flat layout of older versions (no train section)"
    return None


def saved_run_config(run_dir: str) -> Optional[PretrainConfig]:
    """The PretrainConfig saved in a run directory, or found from one of its checkpoints (RUN/checkpoints/
    step-N); None when there is none. A file in an older format is a ConfigError saying to upgrade it."""
    from ..config import old_format, read_json

    for cand in (os.path.join(run_dir, RUN_CONFIG_FILE), os.path.join(run_dir, "..", "..", RUN_CONFIG_FILE)):
        if os.path.isfile(cand):
            cand = os.path.normpath(cand)
            d = read_json(cand)
            old = old_run_config(d)
            if old:
                raise old_format(cand, old, os.path.dirname(cand))
            return PretrainConfig.from_dict(d, source=cand)
    return None


class _WriteRunConfig(TrainerCallback):
    """Writes OUT/pretrain_config.json (nested: the run's fields + "train") when training starts: not on
    resuming a run that is already complete, which must be left exactly as it was."""

    def __init__(self, pc: PretrainConfig):
        self.pc = pc

    def on_train_begin(self, trainer) -> None:
        if trainer.is_main:
            write_run_config(self.pc, os.path.join(self.pc.out, RUN_CONFIG_FILE))


def write_run_config(pc: PretrainConfig, path: str) -> None:
    """pc as a run's pretrain_config.json (nested: the run's fields + "train"), atomically."""
    atomic_write_text(path, json.dumps(pc.to_dict(), indent=2, ensure_ascii=False))


# ---------------------------------------------------------------- showing predictions
def fill_mask_examples(model, tokenizer, sentences: Sequence[str], masking: str = "ernie", seed: int = 0,
                       rate: float = 0.15, top_k: int = 3) -> list[dict]:
    """Mask each sentence with `masking` (always [MASK], no random/keep) and report the model's guesses."""
    from ..objectives.masking import Masker, describe_masking
    from ..objectives.pipeline import SEGMENTATION_FOR
    from ..objectives.segment import SentenceSegmenter

    mcfg = MaskingConfig(strategy=masking, rate=rate, mask_prob=1.0, random_prob=0.0)
    masker = Masker(mcfg, model.config.vocab_size, tokenizer.mask_token_id, tokenizer.all_special_ids)
    enc = SentenceSegmenter(tokenizer, SEGMENTATION_FOR[masking], max_tokens=model.config.max_position_embeddings - 2)
    rng = np.random.default_rng(seed)
    model.eval()
    out = []
    for s, (ids, flags) in zip(sentences, enc.encode_batch(list(sentences))):
        ids = np.concatenate([[tokenizer.cls_token_id], ids, [tokenizer.sep_token_id]]).astype(np.int64)
        flags = np.concatenate([[0], flags, [0]]).astype(np.uint8)
        units, level = masker.choose(ids, flags, rng)
        masked, labels = masker.apply(ids, units, rng)
        with torch.no_grad():
            logits = model(input_ids=torch.from_numpy(masked[None])).logits[0]  # (T, V)
        pos = np.flatnonzero(labels != IGNORE)
        top = logits[pos].topk(top_k, dim=-1).indices.tolist()
        toks = tokenizer.convert_ids_to_tokens(ids[1:-1])
        out.append({"sentence": s, "level": level, "masked": describe_masking(toks, [(b - 1, e - 1) for b, e in units]),
                    "targets": tokenizer.convert_ids_to_tokens(ids[pos]),
                    "predictions": [tokenizer.convert_ids_to_tokens(t) for t in top],
                    "correct": int(sum(t[0] == g for t, g in zip(top, ids[pos])))})
    return out
