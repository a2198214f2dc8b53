"""Vocabulary pruning: keep only the pieces a corpus uses (a smaller embedding matrix, same outputs on it)."""
from __future__ import annotations

import json
import os
from typing import Iterable, Sequence

from ...errors import CheckpointError


def used_piece_ids(tokenizer, lines: Iterable[str], batch: int = 2000) -> dict[int, int]:
    """Piece id -> count over `lines` (tokenized without specials)."""
    counts: dict[int, int] = {}
    buf: list[str] = []

    def flush() -> None:
        for enc in tokenizer.backend.encode_batch(buf, add_special_tokens=False):
            for i in enc.ids:
                counts[i] = counts.get(i, 0) + 1
        buf.clear()

    for line in lines:
        line = line.strip()
        if line:
            buf.append(line)
            if len(buf) >= batch:
                flush()
    if buf:
        flush()
    return counts


def corpus_lines(paths: Sequence[str]) -> Iterable[str]:
    """Lines of every text file under `paths` (files or directories, recursively; undecodable bytes replaced)."""
    for p in paths:
        if not os.path.exists(p):
            raise CheckpointError(f"{p}: vocabulary corpus not found")
        files = [p] if os.path.isfile(p) else sorted(os.path.join(d, n) for d, _, ns in os.walk(p) for n in ns)
        for fp in files:
            with open(fp, encoding="utf-8", errors="replace") as fh:
                yield from fh


def prune_vocabulary(model, keep_ids: Iterable[int]):
    """Keep only `keep_ids` (plus the special tokens), in their original order: a smaller embedding matrix
    and a Unigram model over the kept pieces. Text that only uses kept pieces tokenizes to the same pieces
    (Viterbi's best path cannot use a removed piece), so its outputs are unchanged."""
    import torch
    from tokenizers import Tokenizer as HFTokenizer

    from ...modeling import build_model
    from ...tokenization import Tokenizer

    tok = model.tokenizer
    spec = json.loads(tok.backend.to_str())
    vocab = spec["model"]["vocab"]  # [[piece, score], ...] in id order
    keep = sorted(set(int(i) for i in keep_ids if 0 <= int(i) < len(vocab)) | set(tok.all_special_ids))
    new_id = {old: new for new, old in enumerate(keep)}
    spec["model"]["vocab"] = [vocab[i] for i in keep]
    spec["model"]["unk_id"] = new_id[spec["model"]["unk_id"]]
    for a in spec.get("added_tokens", []):
        a["id"] = new_id[a["id"]]
    for name, sp in (spec.get("post_processor") or {}).get("special_tokens", {}).items():
        sp["ids"] = [new_id[i] for i in sp["ids"]]
    emb = model.backbone.embeddings.word
    cfg = model.config.replace(vocab_size=len(keep), pad_token_id=new_id[model.config.pad_token_id])
    pruned = build_model(cfg, seed=0)
    sd = model.state_dict()
    sd["backbone.embeddings.word.weight"] = emb.weight.detach()[torch.tensor(keep)]
    pruned.load_state_dict(sd)
    pruned.tokenizer = Tokenizer(HFTokenizer.from_str(json.dumps(spec)), dict(tok.specials),
                                 do_lower_case=False, model_max_length=tok.model_max_length)
    return pruned.eval()
