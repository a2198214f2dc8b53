"""The transformers baseline of the GLUE recipe: the same model, files, split and budget with Trainer.

    python recipes/glue_transformers.py --task sst2 --data runs/glue/data --model MODEL --out DIR \
        [--epochs 3] [--lr 5e-5] [--batch-size 32] [--max-length 128] [--seed 42]

Reads train.tsv/dev.tsv through bertfam's GLUE reader and scores dev with bertfam's metric functions, so
the two rows of the results table differ only in the training code. Writes DIR/eval_results.json.
"""
from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    for flag, kind, default in (("--task", str, None), ("--data", str, None), ("--model", str, None),
                                ("--out", str, None), ("--epochs", float, 3.0), ("--lr", float, 5e-5),
                                ("--batch-size", int, 32), ("--max-length", int, 128), ("--seed", int, 42),
                                ("--threads", int, 2)):
        ap.add_argument(flag, type=kind, default=default, required=default is None)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    from transformers import (AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding, Trainer,
                              TrainingArguments)

    from bertfam.data.glue import find_task_files, read_glue
    from bertfam.tasks.inputs import score
    from bertfam.tasks.table import get_task

    spec = get_task(a.task)
    files = find_task_files(a.data, spec.name)
    train, dev = read_glue(spec.name, files["train"]), read_glue(spec.name, files["dev"])
    labels = list(spec.labels) if spec.labels else None
    tok = AutoTokenizer.from_pretrained(a.model)

    def encode(examples):
        rows = []
        for ex in examples:
            enc = tok(ex.text_a, ex.text_b, truncation=True, max_length=a.max_length)
            enc["labels"] = float(ex.label) if labels is None else labels.index(ex.label)
            rows.append(enc)
        return rows

    model = AutoModelForSequenceClassification.from_pretrained(
        a.model, num_labels=1 if labels is None else len(labels),
        problem_type="regression" if labels is None else "single_label_classification")
    def as_names(values) -> list:
        return [float(v) for v in values] if labels is None else [labels[int(i)] for i in values]

    def dev_metrics(pred) -> dict:  # bertfam's metric on label names, as `bertfam finetune` scores dev
        logits = pred.predictions
        names = logits[:, 0].tolist() if labels is None else [labels[i] for i in np.argmax(logits, -1)]
        # the gold labels as the evaluation loader ordered them: Trainer may reorder the dev set (a length-
        # grouped sampler), so the file's order is not the predictions' order
        gold = np.asarray(pred.label_ids).reshape(len(names), -1)[:, 0]
        return score(spec, names, as_names(gold))

    # evaluated after every epoch and the best evaluation reported: bertfam keeps its best epoch the same way
    args = TrainingArguments(output_dir=a.out, learning_rate=a.lr, per_device_train_batch_size=a.batch_size,
                             per_device_eval_batch_size=64, num_train_epochs=a.epochs, warmup_steps=0.1,
                             weight_decay=0.01, seed=a.seed, train_sampling_strategy="group_by_length",
                             eval_strategy="epoch", save_strategy="no", logging_steps=50, report_to=[],
                             use_cpu=True, dataloader_num_workers=0)
    trainer = Trainer(model=model, args=args, train_dataset=encode(train), eval_dataset=encode(dev),
                      data_collator=DataCollatorWithPadding(tok), compute_metrics=dev_metrics)
    t0 = time.time()
    trainer.train()
    seconds = time.time() - t0
    key = "eval_" + spec.headline
    evals = [h for h in trainer.state.log_history if key in h]
    best = max(evals, key=lambda h: h[key])
    metrics = {k[len("eval_"):]: v for k, v in best.items() if k[len("eval_"):] in dev_metrics_keys(spec)}
    result = {"task": a.task, "metric": spec.headline, "value": best[key], "metrics": metrics,
              "n_train": len(train), "n_dev": len(dev), "best_epoch": best.get("epoch"),
              "per_epoch": [h[key] for h in evals], "train_seconds": round(seconds, 1),
              "engine": "transformers Trainer"}
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "eval_results.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result))


def dev_metrics_keys(spec) -> set:
    return {"accuracy", "f1", "mcc", "pearson", "spearman", spec.headline}


if __name__ == "__main__":
    main()
