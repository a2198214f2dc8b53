"""The engine's XLM-R SentencePiece-unigram tokenizer, rebuilt for the `tokenizers` library.

The engine's per-codepoint normalisation map becomes a SentencePiece "precompiled charsmap"
(`charsmap.py`), then runs of spaces collapse, Metaspace (U+2581) marks word starts and Unigram Viterbi
picks the pieces.
"""
from __future__ import annotations

from typing import Sequence

from ...tokenization import Tokenizer
from .charsmap import precompiled_charsmap

SPECIALS = {"cls_token": "<s>", "sep_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>",
            "mask_token": "<mask>"}
METASPACE = "\u2581"


def build_tokenizer(pieces: Sequence[str], scores: Sequence[float], unk_id: int,
                    norm_map: dict[int, list[int]], model_max_length: int = 512) -> Tokenizer:
    """A bertfam Tokenizer reproducing the engine's XLM-R SentencePiece pipeline, with character offsets.

    <s> A </s> for one text, <s> A </s></s> B </s> for a pair (XLM-R), all token types 0."""
    from tokenizers import AddedToken, Regex, Tokenizer as HFTokenizer, decoders, models, normalizers, \
        pre_tokenizers, processors

    tok = HFTokenizer(models.Unigram(list(zip(pieces, map(float, scores))), unk_id=unk_id, byte_fallback=False))
    tok.normalizer = normalizers.Sequence([normalizers.Precompiled(precompiled_charsmap(norm_map)),
                                           normalizers.Replace(Regex(" {2,}"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=METASPACE, prepend_scheme="always", split=True)
    tok.decoder = decoders.Metaspace(replacement=METASPACE, prepend_scheme="always", split=True)
    index = {p: i for i, p in enumerate(pieces)}
    cls, sep = SPECIALS["cls_token"], SPECIALS["sep_token"]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0", pair=f"{cls}:0 $A:0 {sep}:0 {sep}:0 $B:0 {sep}:0",
        special_tokens=[(cls, index[cls]), (sep, index[sep])])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIALS.values() if t in index])
    return Tokenizer(tok, dict(SPECIALS), do_lower_case=False, model_max_length=model_max_length)
