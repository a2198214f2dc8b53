"""MLM + NSP pre-training throughput: bertfam vs transformers, same config, data, batch, one run.

    nice -n 10 .venv/bin/python benchmarks/pretrain_throughput.py --threads 1 --steps 6 --rounds 1

Data: NSP instances built once by bertfam's builder from --corpus (default: the CLUECorpusSmall sample in
../shared/data; any text file works), tokenized with the bert-base-chinese vocabulary. Both sides train
on the very same instances in the same order with the same plain loop (collate -> forward -> backward ->
AdamW step), fp32, same thread count:
- bertfam: TaskModel (pretraining head, NSP) + PretrainCollator (15 % 80/10/10 masking; the MLM decoder
  runs only on the masked positions via `masked_positions`);
- transformers: BertForPreTraining + DataCollatorForLanguageModeling (mlm_probability 0.15), the
  `next_sentence_label` and token types attached to its batch.
Each side runs in its own subprocess (so peak memory is its own); --rounds 2 runs A B B A against load
drift. Reported: training tokens/s (non-padding tokens / loop time after --warmup steps), peak RSS and
the RSS growth during training.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bench import worker as W  # noqa: E402  (benchmarks/ is on the path when run as a script)
from bench.probes import peak_mb, rss_mb  # noqa: E402
DATA = os.path.join(ROOT, "..", "shared", "data")
DEFAULT_CORPUS = os.path.join(DATA, "corpus", "zh", "clue_corpus_small_sample")
DEFAULT_VOCAB = os.path.join(DATA, "vocab", "bert-base-chinese-vocab.txt")


def instances(a, tok):
    import numpy as np

    from bertfam.data.corpus import iter_documents
    from bertfam.objectives import InstanceBuilder, SentenceSegmenter

    enc = SentenceSegmenter(tok, "wordpiece", max_tokens=a.seq_len)
    docs, need = [], a.batch_size * (a.steps + a.warmup)
    for doc in iter_documents([a.corpus]):
        docs.append(enc.encode_batch(doc))
        if len(docs) >= 4 * need // 3 + 20:
            break
    b = InstanceBuilder("nsp", a.seq_len, tok.cls_token_id, tok.sep_token_id, short_seq_prob=0.0)
    inst = b.build(docs, np.random.default_rng(0))
    if len(inst) < need:
        raise SystemExit(f"only {len(inst)} instances, need {need}")
    return inst[:need]


def worker(a) -> dict:
    import torch

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    from bertfam import HeadConfig, Tokenizer, build_model, preset

    tok = Tokenizer.from_vocab(a.vocab)
    inst = instances(a, tok)
    cfg = preset(a.preset, vocab_size=tok.vocab_size,
                 head=HeadConfig(task="pretraining", pair_objective="nsp"))
    if a.side == "bertfam":
        from bertfam.objectives import PretrainCollator
        from bertfam.objectives.pipeline import make_masker
        from bertfam.objectives.masking import MaskingConfig

        model = build_model(cfg, seed=0)
        coll = PretrainCollator(make_masker(MaskingConfig("token"), tok), tok.pad_token_id, pair=True)

        def collate(exs):
            return coll(exs)
    else:
        from transformers import BertConfig, BertForPreTraining, BertTokenizerFast, DataCollatorForLanguageModeling

        hf_tok = BertTokenizerFast(vocab_file=a.vocab)
        hcfg = BertConfig(vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size,
                          num_hidden_layers=cfg.num_hidden_layers, num_attention_heads=cfg.num_attention_heads,
                          intermediate_size=cfg.intermediate_size, max_position_embeddings=cfg.max_position_embeddings,
                          type_vocab_size=cfg.type_vocab_size)
        model = BertForPreTraining(hcfg)
        coll = DataCollatorForLanguageModeling(hf_tok, mlm=True, mlm_probability=0.15, return_tensors="pt")

        def collate(exs):
            feats = [{"input_ids": ex["input_ids"].tolist(),
                      "token_type_ids": [0] * ex["a_len"] + [1] * (len(ex["input_ids"]) - ex["a_len"])}
                     for ex in exs]
            batch = coll(feats)
            batch["next_sentence_label"] = torch.tensor([ex["pair_label"] for ex in exs])
            return batch
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    base = rss_mb()
    tokens, t0 = 0, None
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            t0 = time.perf_counter()
        exs = inst[step * a.batch_size:(step + 1) * a.batch_size]
        batch = collate(exs)
        out = model(**batch)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step >= a.warmup:
            tokens += int(batch["attention_mask"].sum())
    dt = time.perf_counter() - t0
    peak = peak_mb()
    return {"side": a.side, "tokens_per_s": tokens / dt, "step_s": dt / a.steps, "peak_rss_mb": peak,
            "train_rss_growth_mb": peak - base, "loss": float(out.loss)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", default=DEFAULT_CORPUS)
    p.add_argument("--vocab", default=DEFAULT_VOCAB)
    p.add_argument("--preset", default="bert-mini")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=1, help="1: A B; 2: A B B A ...")
    p.add_argument("--out", default=None, help="write the results as JSON here")
    p.add_argument("--side", choices=["bertfam", "transformers"], default=None, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.side:  # worker mode
        W.emit(worker(a))
        return
    order = []
    for r in range(a.rounds):
        order += ["bertfam", "transformers"] if r % 2 == 0 else ["transformers", "bertfam"]
    results: dict[str, list] = {"bertfam": [], "transformers": []}
    for side in order:
        cmd = [sys.executable, os.path.abspath(__file__), "--side", side] + sys.argv[1:]
        try:
            results[side].append(W.run(cmd, dict(os.environ, OMP_NUM_THREADS=str(a.threads)), what=f"{side} worker"))
        except W.WorkerError as e:
            raise SystemExit(str(e)) from None
        print(f"  {side}: {results[side][-1]['tokens_per_s']:.0f} tokens/s", file=sys.stderr)
    med = {s: {k: statistics.median(x[k] for x in v) for k in ("tokens_per_s", "step_s", "peak_rss_mb",
                                                                 "train_rss_growth_mb")} for s, v in results.items()}
    print(f"\nMLM+NSP pre-training, {a.preset} (bert-base-chinese vocab, {a.seq_len} tokens, batch {a.batch_size}), "
          f"{a.steps} timed steps, {a.threads} thread(s), fp32, median of {a.rounds} round(s)")
    print(f"{'':14}{'tokens/s':>10}{'s/step':>9}{'peak RSS MB':>13}{'RSS growth MB':>15}")
    for s in ("bertfam", "transformers"):
        m = med[s]
        print(f"{s:14}{m['tokens_per_s']:>10.0f}{m['step_s']:>9.2f}{m['peak_rss_mb']:>13.0f}"
              f"{m['train_rss_growth_mb']:>15.0f}")
    ratio = med["bertfam"]["tokens_per_s"] / med["transformers"]["tokens_per_s"]
    mem = med["bertfam"]["peak_rss_mb"] / med["transformers"]["peak_rss_mb"]
    print(f"ratio bertfam / transformers: throughput {ratio:.2f}x (target >= 1.5x), peak memory {mem:.2f}x")
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            json.dump({"args": vars(a), "runs": results, "median": med, "throughput_ratio": ratio,
                       "peak_memory_ratio": mem}, f, indent=2)


if __name__ == "__main__":
    main()
