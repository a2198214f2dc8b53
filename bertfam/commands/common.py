"""Argument groups shared by the training commands (one definition, per-command defaults)."""
from __future__ import annotations


def add_optimization_args(p, *, epochs: float, batch_size: int, lr: float) -> None:
    """--epochs --max-steps --batch-size --lr --warmup-ratio --seed --save-every (TrainConfig fields)."""
    p.add_argument("--epochs", type=float, default=epochs)
    p.add_argument("--max-steps", type=int, default=None, help="optimizer steps (overrides --epochs)")
    p.add_argument("--batch-size", type=int, default=batch_size)
    p.add_argument("--lr", type=float, default=lr)
    p.add_argument("--warmup-ratio", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--save-every", type=int, default=0, help="optimizer steps between checkpoints (0: end only)")
