"""The harness tests' world of one: this process as the one worker of a hard-restart job."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch.distributed as dist

from rootcause_engine.worker.world_events import EVENTS_DIR_VARIABLE
from rootcause_harness.faults import FAULT_VARIABLE, SIM_DIR_VARIABLE
from rootcause_harness.loopback import free_port


@pytest.fixture
def world_of_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Pod ``train-worker-0``'s one worker, no soft-restart channel, no injected fault; its group
    destroyed after."""
    for name, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": str(free_port()), "FLYTE_INTERNAL_WORKER_NAME": "train-worker-0",
                        SIM_DIR_VARIABLE: str(tmp_path)}.items():
        monkeypatch.setenv(name, value)
    for name in (EVENTS_DIR_VARIABLE, "TORCHELASTIC_RESTART_COUNT", FAULT_VARIABLE):
        monkeypatch.delenv(name, raising=False)
    yield tmp_path
    if dist.is_initialized():
        dist.destroy_process_group()
