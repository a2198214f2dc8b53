"""`bertfam kbert show`: print the K-BERT sentence tree of a text (tokens, soft positions, visibility).

Fine-tuning with a graph is `bertfam finetune --kg FILE[,FILE]`.
"""
from __future__ import annotations

from .common import int_range, non_negative_int


def register(sub) -> None:
    p = sub.add_parser("kbert", help="K-BERT tools (fine-tune with `bertfam finetune --kg`)")
    ks = p.add_subparsers(dest="kbert_cmd", required=True)
    s = ks.add_parser("show", help="show the flattened sentence tree and visible matrix of texts")
    s.add_argument("--kg", required=True, help=".spo file(s), comma-separated")
    s.add_argument("--tokenizer", required=True, help="model or tokenizer directory")
    s.add_argument("--max-length", type=int_range(3), default=128)  # [CLS] + one token + [SEP]
    s.add_argument("--max-entities", type=non_negative_int, default=2)
    s.add_argument("text", nargs="+")
    s.set_defaults(func=_show)


def _show(args) -> int:
    from ..knowledge import KBertInputBuilder, KnowledgeGraph
    from ..tokenization import Tokenizer

    kg = KnowledgeGraph.load(args.kg, max_entities=args.max_entities)
    enc = KBertInputBuilder(Tokenizer.from_pretrained(args.tokenizer), kg, args.max_length)
    print(f"graph: {len(kg)} subjects, {kg.num_triples} triples, {len(kg.skipped)} malformed lines skipped")
    for text in args.text:
        e = enc.encode(text)
        toks = enc.tok.convert_ids_to_tokens(e["input_ids"])
        print(f"\n{text}")
        print(" ".join(f"{t}{'*' if inj else ''}/{p}" for t, p, inj in zip(toks, e["position_ids"], e["injected"])))
        for t, row in zip(toks, e["visible_matrix"].int().tolist()):
            print(f"  {''.join(map(str, row))}  {t}")
    print(f"\n(* = injected, /n = soft position) {enc.stats}")
    return 0
