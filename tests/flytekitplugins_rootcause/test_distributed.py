"""``flytekitplugins_rootcause.distributed``: the plugin's name for the engine's backend and device choice."""

from __future__ import annotations

import torch
import torch.distributed as dist

import flytekitplugins_rootcause.distributed as public
from rootcause_engine import distributed as engine


def test_the_public_names_are_the_engine_s_functions() -> None:
    assert public.__all__ == ["default_backend", "default_device"]
    assert public.default_backend is engine.default_backend
    assert public.default_device is engine.default_device


def test_the_backend_is_nccl_only_where_cuda_and_nccl_are_both_there() -> None:
    expected = "nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"
    assert public.default_backend() == expected


def test_the_device_follows_the_backend_and_the_local_rank() -> None:
    device = public.default_device(3)
    if public.default_backend() == "gloo":
        assert device == torch.device("cpu")
    else:
        assert device == torch.device("cuda", 3 % torch.cuda.device_count())
