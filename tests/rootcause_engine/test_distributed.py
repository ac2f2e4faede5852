"""The backend and device choice (``rootcause_engine/distributed.py``): NCCL and the local GPU where CUDA and
NCCL are both there, gloo and the CPU otherwise."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from rootcause_engine.distributed import default_backend, default_device


def _machine(monkeypatch: pytest.MonkeyPatch, *, cuda: bool, nccl: bool, gpus: int = 0) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setattr(dist, "is_nccl_available", lambda: nccl)


def test_this_machine_gets_the_backend_its_torch_build_and_devices_allow() -> None:
    expected = "nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"
    assert default_backend() == expected
    device = default_device(0)
    assert device.type == ("cuda" if expected == "nccl" else "cpu")


@pytest.mark.parametrize(("cuda", "nccl"), [(False, False), (False, True), (True, False)])
def test_without_both_cuda_and_nccl_workers_use_gloo_on_the_cpu(
    monkeypatch: pytest.MonkeyPatch, cuda: bool, nccl: bool
) -> None:
    _machine(monkeypatch, cuda=cuda, nccl=nccl, gpus=4)
    assert default_backend() == "gloo"
    assert default_device(3) == torch.device("cpu")


def test_with_cuda_and_nccl_each_local_rank_gets_its_gpu_wrapping_around_the_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _machine(monkeypatch, cuda=True, nccl=True, gpus=4)
    assert default_backend() == "nccl"
    assert [default_device(rank) for rank in (0, 3, 5)] == [
        torch.device("cuda", 0), torch.device("cuda", 3), torch.device("cuda", 1)
    ]
