"""Pick the collective backend the way users expect: NCCL where CUDA is present, gloo otherwise."""

from __future__ import annotations

import torch
import torch.distributed as dist


def default_backend() -> str:
    """``nccl`` on a CUDA machine whose torch build has NCCL, else ``gloo`` (CPU)."""
    if torch.cuda.is_available() and dist.is_nccl_available():
        return "nccl"
    return "gloo"


def default_device(local_rank: int) -> torch.device:
    """The device a worker should use: its local GPU under NCCL, else the CPU."""
    if default_backend() == "nccl":
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    return torch.device("cpu")
