"""Fine-tuning of the multimodal members (`bertfam multimodal finetune`): spoken-question QA and
classification of (text, features) pairs."""
from __future__ import annotations

from typing import Optional

from ..config import HeadConfig
from ..errors import ConfigError
from ..tokenization import tokenizer_from
from ..training import TrainConfig, Trainer
from .config import AudioConfig
from .data import ClassifyCollator, QACollator, check_qa_record, qa_windows, text_examples
from .evaluate import evaluate_classify, evaluate_qa
from .runs import (adapter_config, finish, new_or_init, read_records, run_train_config,
                   split_eval, write_report)


def finetune_multimodal(modality: str, task: str, features_dir: str, out_dir: str, *, vocab: Optional[str] = None,
                        config: str = "bert-tiny", init: Optional[str] = None, manifest: Optional[str] = None,
                        max_length: int = 128, doc_stride: int = 32, eval_fraction: float = 0.1,
                        audio: Optional[AudioConfig] = None, train: Optional[TrainConfig] = None,
                        resume: Optional[str] = None) -> dict:
    """task qa: extractive QA over the text passage with the question given as features (spoken question);
    task classify: a label per (text, features) pair (manifest field `label`). `train` (whose seed
    also draws the split and a new model's weights): as `pretrain_multimodal`."""
    if modality == "video":
        raise ConfigError("fine-tuning paths exist for image and speech (video models are token models: use "
                          "`bertfam finetune` on their text, or pre-train with visual words)")
    tok = tokenizer_from(vocab, init)  # --vocab, else the --init checkpoint's
    tc = run_train_config(out_dir, train)
    if task == "qa":
        records, report, audio = read_records(modality, features_dir, manifest, (), audio, check=check_qa_record)
        write_report(out_dir, report)
        mm = adapter_config(modality, records, audio)
        model = new_or_init(config, tok.vocab_size, mm, HeadConfig(task="span", answerability=False), init, tc.seed)
        tr_rec, ev_rec = split_eval(records, eval_fraction, tc.seed)
        tr, _ = qa_windows(tr_rec, tok, max_length, doc_stride)
        trainer = Trainer(model, tc, tr, QACollator(tok.pad_token_id), tokenizer=tok,
                          eval_fn=(lambda m: evaluate_qa(m, ev_rec, tok, max_length, doc_stride, tc.batch_size))
                          if ev_rec else None)
        return finish(trainer, resume)
    if task == "classify":
        records, report, audio = read_records(modality, features_dir, manifest, ("text", "label"), audio)
        write_report(out_dir, report)
        labels = sorted({str(r.fields["label"]) for r in records})
        mm = adapter_config(modality, records, audio)
        model = new_or_init(config, tok.vocab_size, mm, HeadConfig(task="classification", num_labels=len(labels),
                                                                   labels=labels), init, tc.seed)
        tr, ev = split_eval(text_examples(records, tok, max_length), eval_fraction, tc.seed)
        collate = ClassifyCollator(tok.pad_token_id, {name: i for i, name in enumerate(labels)})
        trainer = Trainer(model, tc, tr, collate, tokenizer=tok,
                          eval_fn=(lambda m: evaluate_classify(m, ev, tok, tc.batch_size)) if ev else None)
        return finish(trainer, resume)
    raise ConfigError(f"task {task!r} not in qa/classify")
