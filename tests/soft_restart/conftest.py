"""The soft-restart tests' worker channel: this process plays a worker whose agent writes events."""

from __future__ import annotations

from pathlib import Path

import pytest

from rootcause_engine import soft_restart
from rootcause_engine.agent.worker_channel import WorkerChannel
from rootcause_engine.worker.world_events import EVENTS_DIR_VARIABLE


@pytest.fixture
def channel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> WorkerChannel:
    monkeypatch.setenv(EVENTS_DIR_VARIABLE, str(tmp_path))
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setattr(soft_restart, "_channel", None)
    return WorkerChannel(str(tmp_path))
