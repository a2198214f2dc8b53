"""Multimodal jobs (library entry points of `bertfam multimodal ...` and `bertfam pretrain --modality`):
one config per job and one function that runs it (the work is bertfam.multimodal's).

- `run_multimodal_vocab(MultimodalVocabConfig)`: a k-means codebook of visual words (VideoBERT);
- `run_multimodal_pretrain(MultimodalPretrainConfig)` / `run_multimodal_finetune(MultimodalFinetuneConfig)`:
  a training run; the summary is returned, with "report" (what the commands print: steps, epochs,
  elapsed_s, final_eval) on the main process;
- `run_multimodal_eval(MultimodalEvalConfig)`: a saved model scored (with the shuffled-features ablation);
- `run_multimodal_convert(MultimodalConvertConfig)`: Hugging Face VisualBERT <-> bertfam directory.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Optional

from ..multimodal.config import AudioConfig
from ..multimodal.runs import TRAIN_DEFAULTS
from ..training import TrainConfig
from .options import RunOptions

REPORT_KEYS = ("steps", "epochs", "elapsed_s", "final_eval")
# fields that older versions' run configs held beside their train section and the trainer's field of the same
# name holds now (`seed`: one seed for the trainer, a new model's weights and the evaluation split);
# `bertfam upgrade` moves them into train
MOVED_TO_TRAIN = ("seed",)


@dataclass(kw_only=True)
class MultimodalRunConfig(RunOptions):
    """What a multimodal training run shares: its features (DIR/manifest.jsonl unless `manifest`), run
    directory, tokenizer (`vocab`, else the `init` model's), model (`model_config` for a new one, or
    `init`), held-out records. `max_length` None: the job's own default. The speech front end fields
    default to AudioConfig's. `train`: the trainer's fields (multimodal.runs.TRAIN_DEFAULTS); its seed also
    draws a new model's weights and the evaluation split."""

    # seed 0 among them: what the runs' own seed was before train.seed became the one seed (`--seed` set both)
    TRAIN_DEFAULTS: ClassVar[dict] = dict(TRAIN_DEFAULTS)

    modality: str
    features: str
    out: str
    vocab: Optional[str] = None
    model_config: str = "bert-tiny"
    init: Optional[str] = None
    manifest: Optional[str] = None
    max_length: Optional[int] = None
    eval_fraction: float = 0.1
    resume: Optional[str] = None
    sample_rate: int = AudioConfig.sample_rate
    n_mels: int = AudioConfig.n_mels
    stack: int = AudioConfig.stack
    max_frames: int = AudioConfig.max_frames
    train: TrainConfig = field(default_factory=lambda: MultimodalRunConfig.default_train())

    def run_kwargs(self) -> dict:
        """The keyword arguments pretrain_multimodal and finetune_multimodal share."""
        audio = {k: getattr(self, k) for k in ("sample_rate", "n_mels", "stack", "max_frames")}
        kw = dict(vocab=self.vocab, config=self.model_config, init=self.init, manifest=self.manifest,
                  eval_fraction=self.eval_fraction, audio=AudioConfig(**audio), train=self.train, resume=self.resume)
        if self.max_length:
            kw["max_length"] = self.max_length
        return kw


@dataclass(kw_only=True)
class MultimodalPretrainConfig(MultimodalRunConfig):
    """Pre-training: masked LM on text + features (image, speech: + match; video: over `codebook`'s words)."""

    codebook: Optional[str] = None
    mask_rate: float = 0.15
    mismatch_prob: float = 0.5


@dataclass(kw_only=True)
class MultimodalFinetuneConfig(MultimodalRunConfig):
    """Fine-tuning: `task` qa (a spoken question over a text passage; windows overlap by `doc_stride`, None:
    finetune_multimodal's default) or classify."""

    task: str
    doc_stride: Optional[int] = None


def _reported(summary: dict) -> dict:
    from ..training.distributed import is_main_process

    if is_main_process():  # under torchrun every rank ends here
        summary["report"] = {k: v for k, v in summary.items() if k in REPORT_KEYS}
    return summary


def run_multimodal_pretrain(cfg: MultimodalPretrainConfig) -> dict:
    from ..multimodal.pretrain import pretrain_multimodal

    return _reported(pretrain_multimodal(cfg.modality, cfg.features, cfg.out, codebook=cfg.codebook,
                                         mask_rate=cfg.mask_rate, mismatch_prob=cfg.mismatch_prob,
                                         **cfg.run_kwargs()))


def run_multimodal_finetune(cfg: MultimodalFinetuneConfig) -> dict:
    from ..multimodal.finetune import finetune_multimodal

    stride = {} if cfg.doc_stride is None else {"doc_stride": cfg.doc_stride}
    return _reported(finetune_multimodal(cfg.modality, cfg.task, cfg.features, cfg.out, **stride,
                                         **cfg.run_kwargs()))


@dataclass
class MultimodalVocabConfig:
    """A codebook of `size` visual words fitted on at most `max_samples` clip vectors, written to `out`."""

    features: str
    out: str
    size: int = 1024
    manifest: Optional[str] = None
    seed: int = 0
    max_samples: int = 100_000


def run_multimodal_vocab(cfg: MultimodalVocabConfig) -> dict:
    """Fit and save the codebook; returns its {"size", "dim", "clips", "unused_words", ...}."""
    from ..multimodal.pretrain import fit_visual_vocab

    return fit_visual_vocab(cfg.features, cfg.out, cfg.size, cfg.manifest, cfg.seed, cfg.max_samples)


@dataclass
class MultimodalEvalConfig:
    model: str
    features: str
    manifest: Optional[str] = None
    max_length: int = 128
    batch_size: int = 32


def run_multimodal_eval(cfg: MultimodalEvalConfig) -> dict:
    from ..multimodal.evaluate import evaluate_multimodal

    return evaluate_multimodal(cfg.model, cfg.features, cfg.manifest, max_length=cfg.max_length,
                               batch_size=cfg.batch_size)


@dataclass
class MultimodalConvertConfig:
    """`src` (a multimodal or Hugging Face VisualBERT directory) written to `dst` as `to` ("bertfam", "hf")."""

    src: str
    dst: str
    to: str = "bertfam"


def run_multimodal_convert(cfg: MultimodalConvertConfig) -> str:
    """Convert; returns the directory written."""
    from ..multimodal import load_multimodal

    model = load_multimodal(cfg.src)
    if cfg.to == "hf":
        from ..multimodal.hf import export_hf_visualbert

        export_hf_visualbert(model, cfg.dst)
    else:
        model.save_pretrained(cfg.dst)
    return cfg.dst
