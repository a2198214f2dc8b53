"""Tiny saved checkpoints with the Chinese test vocabulary, one per head (classification, span): for tests of a
command's plumbing (quantize, calibrate), not of accuracy."""
from __future__ import annotations

import bertfam
from bertfam import HeadConfig
from bertfam.config import FinetuneSettings, MRCSettings

from .conftest import ZH_VOCAB


def save_head_checkpoints(root, hidden: int) -> dict:
    """{"cls": DIR, "span": DIR}: one-layer models of width `hidden` saved under `root`."""
    tok = bertfam.Tokenizer.from_vocab(ZH_VOCAB)
    heads = {"cls": HeadConfig(task="classification", num_labels=2, labels=["0", "1"],
                               finetune=FinetuneSettings(task="sst2", kind="single", max_length=32)),
             "span": HeadConfig(task="span", mrc=MRCSettings(max_length=96, doc_stride=32))}
    out = {}
    for name, head in heads.items():
        cfg = bertfam.preset("bert-tiny", vocab_size=tok.vocab_size, hidden_size=hidden, num_attention_heads=2,
                             intermediate_size=2 * hidden, num_hidden_layers=1, max_position_embeddings=128,
                             head=head)
        out[name] = str(root / name)
        bertfam.build_model(cfg, seed=0).save_pretrained(out[name], tokenizer=tok)
    return out
