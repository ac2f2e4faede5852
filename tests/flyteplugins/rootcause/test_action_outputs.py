"""A pod without rank 0 leaves the action's files to rank 0's pod, by Flyte 2's runtime's own rule."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from flyte._internal.runtime.convert import Outputs, convert_from_native_to_error
from flyte._internal.runtime.io import upload_error, upload_outputs
from flyte.models import CLUSTERED_WORKER_ENV
from flyteidl2.task import common_pb2

from flyteplugins.rootcause.upstream import leave_outputs_to_rank_0


def _uploads(folder: Path) -> list[str]:
    """What the runtime writes after the task returned, then after it failed, under ``folder``."""
    asyncio.run(upload_outputs(Outputs(proto_outputs=common_pb2.Outputs()), str(folder)))
    error = convert_from_native_to_error(RuntimeError("a validation error"))
    asyncio.run(upload_error(error.err, str(folder), recoverable=True))
    return sorted(path.name for path in folder.iterdir())


def test_the_pod_returns_its_first_rank_s_value_and_the_runtime_writes_neither_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(CLUSTERED_WORKER_ENV, raising=False)
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    monkeypatch.setenv("RANK", "0")  # restored after the test: the marking changes this process's environment
    before = tmp_path / "before"
    before.mkdir()
    assert _uploads(before) == ["error.pb", "outputs.pb"]  # an unmarked process writes both

    assert leave_outputs_to_rank_0({3: 103.0, 2: 102.0}) == 102.0
    after = tmp_path / "after"
    after.mkdir()
    assert _uploads(after) == []


def test_a_pod_none_of_whose_workers_returned_writes_nothing_either(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(CLUSTERED_WORKER_ENV, raising=False)
    monkeypatch.setenv("RANK", "0")
    assert leave_outputs_to_rank_0({}) is None
    assert _uploads(tmp_path) == []
