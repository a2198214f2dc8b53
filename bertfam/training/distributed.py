"""torchrun support: process group set-up and rank helpers (gloo on CPU, nccl on GPU)."""
from __future__ import annotations

import os

import torch
import torch.distributed as dist


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main_process() -> bool:
    """Rank 0, or a run without torchrun. Read from torchrun's RANK so it holds before and after the
    process group exists (a command's summary is printed after the trainer is gone)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank() == 0
    return int(os.environ.get("RANK", "0")) == 0


def init_if_needed() -> tuple[int, int]:
    """(rank, world). Initialises the default process group when launched by torchrun."""
    world = world_size()
    if world <= 1:
        return 0, 1
    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend=backend)
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    return dist.get_rank(), dist.get_world_size()


def barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def all_reduce_mean(x: float) -> float:
    if not (dist.is_available() and dist.is_initialized()):
        return x
    t = torch.tensor([x], dtype=torch.float64)
    dist.all_reduce(t)
    return float(t.item()) / dist.get_world_size()
