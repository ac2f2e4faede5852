"""Real torch elastic launches (gloo, CPU) through ``ElasticRootCause`` tasks run locally.

Each test runs the task as ``pyflyte run`` would locally: flytekit's local execution calls the
task, which launches real worker processes; faults are real exceptions and real signals.
"""

from __future__ import annotations

import signal
from multiprocessing import popen_fork

import pytest
from flytekit.exceptions.user import FlyteRecoverableException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

from rootcause_core.ordering import Role, TimeSource
from rootcause_harness.faults import reap_exited_workers_first
from tests.elastic_tasks import scenarios
from tests.elastic_tasks.errors import root_cause_error_of
from tests.timestamps import assert_sub_second

pytestmark = pytest.mark.slow


def test_raising_rank_is_the_root_cause_and_survivors_are_victims() -> None:
    with pytest.raises(Exception) as excinfo:
        scenarios.rank_raises(k=2)
    error = root_cause_error_of(excinfo)
    root = error.root_cause
    assert (root.global_rank, root.role, root.time_source) == (2, Role.CANDIDATE, TimeSource.RECORDED)
    assert root.exception_type == "builtins.ValueError"
    assert "bad batch on rank 2" in root.message
    assert "raise ValueError" in root.traceback
    assert sorted(f.global_rank for f in error.failures[1:]) == [0, 1]
    assert all(f.role == Role.VICTIM and f.signal_name == "SIGTERM" for f in error.failures[1:])
    first_line = error.report.splitlines()[0]
    assert first_line.startswith("[root cause] rank 2 (local rank 2, group rank 0) on worker ")
    assert "ValueError: bad batch on rank 2" in first_line
    assert isinstance(error.timestamp, float) and error.timestamp == pytest.approx(root.timestamp_ns / 1e9)
    assert not isinstance(error, FlyteRecoverableException)

    # (h) torch still parses the error file our recorder wrote
    torch_view = ProcessFailure(local_rank=2, pid=root.pid or 0, exitcode=1, error_file=root.source)
    assert torch_view.message["message"] == "ValueError: bad batch on rank 2"
    assert "raise ValueError" in torch_view.message["extraInfo"]["py_callstack"]
    assert torch_view.timestamp == root.timestamp_ns // 1_000_000_000
    torch_report = ChildFailedError("train", {2: torch_view}).format_msg()
    assert "ValueError: bad batch on rank 2" in torch_report


def test_sigkilled_rank_gets_its_observed_death_time() -> None:
    with pytest.raises(Exception) as excinfo:
        scenarios.rank_sigkills_itself(k=1)
    root = root_cause_error_of(excinfo).root_cause
    assert (root.global_rank, root.signal_name, root.role) == (1, "SIGKILL", Role.CANDIDATE)
    assert root.time_source == TimeSource.OBSERVED
    assert "OOM killer" in root_cause_error_of(excinfo).report.splitlines()[0]


def test_aborting_rank_is_reported_with_sigabrt() -> None:
    with pytest.raises(Exception) as excinfo:
        scenarios.rank_aborts(k=0)
    error = root_cause_error_of(excinfo)
    root = error.root_cause
    assert (root.global_rank, root.signal_number, root.role) == (0, int(signal.SIGABRT), Role.CANDIDATE)
    assert root.time_source == TimeSource.OBSERVED
    assert "NCCL watchdog" in error.report.splitlines()[0]


def test_sub_second_ordering_of_two_independent_errors() -> None:
    with pytest.raises(Exception) as excinfo:
        scenarios.two_raise_50ms_apart(first=2, second=1)
    error = root_cause_error_of(excinfo)
    first = error.failures[0]
    [second] = [failure for failure in error.failures if failure.global_rank == 1]
    # rank 1 raised only after rank 2's error was on disk: rank 2 is first however slow the machine
    assert (first.global_rank, first.role) == (2, Role.CANDIDATE)
    if second.role == Role.CANDIDATE:
        assert first.timestamp_ns < second.timestamp_ns
        assert_sub_second(first.timestamp_ns, second.timestamp_ns)
    else:
        # the agent noticed rank 2's error file within those 50 ms and began the teardown first
        assert second.role == Role.VICTIM and second.signal_name == "SIGTERM"


def test_killed_rank_beats_the_later_collective_error_of_its_peer() -> None:
    with pytest.raises(Exception) as excinfo:
        scenarios.killed_then_collective_error(k=0, j=1)
    error = root_cause_error_of(excinfo)
    root, peer = error.failures[0], error.failures[1]
    assert (root.global_rank, root.signal_name, root.role) == (0, "SIGKILL", Role.CANDIDATE)
    assert peer.global_rank == 1 and peer.role == Role.VICTIM
    assert peer.time_source == TimeSource.RECORDED, "rank 1 should have raised its collective error"
    # (the order comes from the roles, not from how far apart the two times happened to be)


def test_recoverable_exception_gives_flyte_recoverable_error() -> None:
    with pytest.raises(Exception) as excinfo:
        scenarios.rank_raises_recoverable(k=1)
    error = root_cause_error_of(excinfo)
    assert isinstance(error, FlyteRecoverableException)
    assert error.root_cause.recoverable and error.root_cause.global_rank == 1
    assert "spot capacity lost on rank 1" in error.report.splitlines()[0]


def test_success_returns_rank_zero_value_unchanged() -> None:
    assert scenarios.succeeds(x=7) == {"rank": 0, "x": 7, "world": 2}


def test_a_worker_reaped_before_torch_reads_its_exit_is_still_the_root_cause(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch builds its report of failed workers from their exit codes; a worker some other code
    reaped first has none, and torch's report itself then fails (``TypeError`` on ``None < 0``) in
    place of the ``ChildFailedError``. The failed rank is still the root cause, with its error."""
    monkeypatch.setattr(popen_fork.Popen, "poll", popen_fork.Popen.poll)  # undone after the test
    reap_exited_workers_first()
    with pytest.raises(Exception) as excinfo:
        scenarios.rank_raises(k=1)
    error = root_cause_error_of(excinfo)
    assert (error.root_cause.global_rank, error.root_cause.role) == (1, Role.CANDIDATE)
    assert "bad batch on rank 1" in error.report.splitlines()[0]
    assert "torch's agent failed: TypeError" in error.report
