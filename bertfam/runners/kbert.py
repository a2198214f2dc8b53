"""The K-BERT job of `bertfam kbert show`: the sentence tree of texts under a knowledge graph.

- `run_kbert_show(KBertShowConfig)`: the text `bertfam kbert show` prints (tokens with their soft
  positions and injected marks, the visible matrix, the builder's counts).

Fine-tuning with a graph is `runners.finetune.run_finetune` with `FinetuneRunConfig(kg=...)`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass
class KBertShowConfig:
    """Texts to flatten with the graph of `kg` (.spo file(s), comma-separated) and the tokenizer of
    `tokenizer` (a model or tokenizer directory)."""

    kg: str
    tokenizer: str
    texts: Sequence[str]
    max_length: int = 128
    max_entities: int = 2


def run_kbert_show(cfg: KBertShowConfig) -> str:
    """The graph's counts, then per text its tree (tok*/position) and visible matrix, then the stats."""
    from ..knowledge import KBertInputBuilder, KnowledgeGraph
    from ..tokenization import Tokenizer

    kg = KnowledgeGraph.load(cfg.kg, max_entities=cfg.max_entities)
    enc = KBertInputBuilder(Tokenizer.from_pretrained(cfg.tokenizer), kg, cfg.max_length)
    lines = [f"graph: {len(kg)} subjects, {kg.num_triples} triples, {len(kg.skipped)} malformed lines skipped"]
    for text in cfg.texts:
        e = enc.encode(text)
        toks = enc.tok.convert_ids_to_tokens(e["input_ids"])
        lines.append(f"\n{text}")
        lines.append(" ".join(f"{t}{'*' if inj else ''}/{p}"
                              for t, p, inj in zip(toks, e["position_ids"], e["injected"])))
        for t, row in zip(toks, e["visible_matrix"].int().tolist()):
            lines.append(f"  {''.join(map(str, row))}  {t}")
    lines.append(f"\n(* = injected, /n = soft position) {enc.stats}")
    return "\n".join(lines)
