"""`bertfam kbert show`: print the K-BERT sentence tree of a text (tokens, soft positions, visibility).

The job is runners.kbert.run_kbert_show. Fine-tuning with a graph is `bertfam finetune --kg FILE[,FILE]`.
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
    from ..runners.kbert import KBertShowConfig, run_kbert_show

    print(run_kbert_show(KBertShowConfig(kg=args.kg, tokenizer=args.tokenizer, texts=args.text,
                                         max_length=args.max_length, max_entities=args.max_entities)))
    return 0
