"""``flytekitplugins_rootcause.rank_0_outputs``: the running task's output prefix as flytekit set it up, the
prefix as the isolation gate's board, and the wait around a launch as a context manager (real files, no launch)."""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Iterator
from pathlib import Path

import pytest
from flytekit.core.base_task import IgnoreOutputs
from flytekit.core.context_manager import ExecutionParameters, FlyteContextManager
from flytekit.core.data_persistence import FileAccessProvider

from flytekitplugins_rootcause.exceptions import Rank0OutputsMissingError
from flytekitplugins_rootcause.rank_0_outputs import (
    OutputPrefix,
    await_rank_0_outputs,
    current_output_prefix,
    rank_0_outputs_awaited,
)
from rootcause_engine.agent.isolation_gate import CONTACT_FOLDER
from rootcause_engine.agent.rank_0_outputs import Rank0Outcome


@contextlib.contextmanager
def _task_running(file_access: FileAccessProvider, output_prefix: str | None) -> Iterator[None]:
    """A flytekit context as ``pyflyte-execute`` sets one up for a task: its file access and output prefix."""
    ctx = FlyteContextManager.current_context()
    params = ExecutionParameters(
        execution_date=datetime.datetime.now(datetime.UTC), tmp_dir=file_access.local_sandbox_dir,
        stats=None, execution_id=None, logging=None, raw_output_prefix=file_access.raw_output_prefix,
        output_metadata_prefix=output_prefix,
    )
    state = ctx.new_execution_state().with_params(user_space_params=params)
    with FlyteContextManager.with_context(ctx.with_file_access(file_access).with_execution_state(state)):
        yield


def _file_access(tmp_path: Path) -> FileAccessProvider:
    return FileAccessProvider(str(tmp_path / "sandbox"), str(tmp_path / "raw"))


def test_a_local_run_has_no_output_prefix_to_wait_on(tmp_path: Path) -> None:
    with _task_running(_file_access(tmp_path), None):
        assert current_output_prefix() is None


def test_a_task_run_s_prefix_is_looked_at_through_the_task_s_own_file_access(tmp_path: Path) -> None:
    file_access = _file_access(tmp_path)
    with _task_running(file_access, str(tmp_path / "outputs")):
        where = current_output_prefix()
    assert where == OutputPrefix(file_access, str(tmp_path / "outputs"))


def test_the_prefix_is_the_board_pods_that_lost_each_other_post_to(tmp_path: Path) -> None:
    board = OutputPrefix(_file_access(tmp_path), str(tmp_path)).board()
    assert board.prefix == str(tmp_path) and board.read("pod-1") is None
    board.post("pod-1", b"seen pod-0 last at 12")
    assert (tmp_path / CONTACT_FOLDER / "pod-1").read_bytes() == b"seen pod-0 last at 12"
    assert board.read("pod-1") == b"seen pod-0 last at 12"


def test_a_pod_with_its_diagnosis_off_is_named_from_its_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLYTE_INTERNAL_WORKER_NAME", "train-worker-3")
    with pytest.raises(Rank0OutputsMissingError) as raised:
        await_rank_0_outputs(OutputPrefix(_file_access(tmp_path), str(tmp_path)), None, timeout_s=0.05)
    missing = raised.value.missing
    assert (missing.worker, missing.ranks, missing.rank_0_worker) == ("train-worker-3", None, None)
    assert missing.wait.outcome is Rank0Outcome.NEITHER and missing.output_prefix == str(tmp_path)
    assert "This pod (train-worker-3, " in str(raised.value)


def test_ignore_outputs_leaves_at_once_where_rank_0_s_outputs_are_already_written(tmp_path: Path) -> None:
    (tmp_path / "outputs.pb").write_bytes(b"")
    with (_task_running(_file_access(tmp_path), str(tmp_path)), pytest.raises(IgnoreOutputs) as raised,
          rank_0_outputs_awaited(None, timeout_s=60)):
        raise IgnoreOutputs("rank 0 is on another pod")
    assert str(raised.value) == "rank 0 is on another pod"


def test_ignore_outputs_becomes_the_missing_outputs_error_when_the_bound_passes(tmp_path: Path) -> None:
    with (_task_running(_file_access(tmp_path), str(tmp_path)), pytest.raises(Rank0OutputsMissingError) as raised,
          rank_0_outputs_awaited(None, timeout_s=0.05)):
        raise IgnoreOutputs()
    # the IgnoreOutputs it replaces is not shown as its cause or its context
    assert raised.value.__cause__ is None and raised.value.__suppress_context__
    assert f"wrote neither outputs.pb nor an error document under {tmp_path}" in str(raised.value)


def test_other_errors_and_a_clean_launch_pass_through_without_a_wait(tmp_path: Path) -> None:
    with _task_running(_file_access(tmp_path), str(tmp_path)):
        with pytest.raises(ZeroDivisionError), rank_0_outputs_awaited(None, timeout_s=60):
            raise ZeroDivisionError("rank 0's own failure")
        with rank_0_outputs_awaited(None, timeout_s=60):
            done = "returned"
    assert done == "returned" and not (tmp_path / "outputs.pb").exists()
