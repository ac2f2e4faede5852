"""The failure path never turns a failure into a hang (issue #11).

- A function worker that exits with code 0 without returning its result (``os._exit(0)``; torch's
  worker wrapper also turns a KeyboardInterrupt into exit code 0) is a failure: torch's own join
  counts it as a success, and its monitor loop then reads HEALTHY while any other worker lives.
- A worker that recorded its exception is a failure even if its interpreter never finishes exiting.
- Defence in depth: with torch's monitor path made to believe every worker runs *and* the death
  watcher's thread never started, the agent watchdog (asking the kernel itself) still ends the pod
  with the root-cause report.
"""

from __future__ import annotations

import multiprocessing.connection
from pathlib import Path

import pytest
import torch.multiprocessing as torch_mp

from rootcause_core.ordering import Role, TimeSource
from rootcause_engine.agent.diagnosis.selection import EXITED_WITHOUT_RESULT
from tests.elastic_tasks import stalling_workers
from tests.elastic_tasks.errors import root_cause_error_of
from tests.watchdog_tasks.agent_process import agent_process

pytestmark = pytest.mark.slow

TIMEOUT_S = 240


def test_a_worker_exiting_0_before_returning_is_the_root_cause(tmp_path: Path) -> None:
    with pytest.raises(Exception) as excinfo:
        stalling_workers.rank_1_exits_0_early(marker_dir=str(tmp_path))
    error = root_cause_error_of(excinfo)
    root = error.root_cause
    assert (root.global_rank, root.role, root.exitcode) == (1, Role.CANDIDATE, 0)
    assert root.time_source == TimeSource.OBSERVED
    assert root.message == EXITED_WITHOUT_RESULT
    assert error.report.splitlines()[0].startswith("[root cause] rank 1 (local rank 1, group rank 0) on worker ")
    [victim] = error.failures[1:]
    # rank 0 ignored SIGTERM: the agent's teardown SIGKILLed it after the grace period
    assert (victim.global_rank, victim.role, victim.signal_name) == (0, Role.VICTIM, "SIGKILL")


def test_a_recorded_failure_ends_the_launch_though_its_process_never_exits(tmp_path: Path) -> None:
    """Without the early notice the agent would wait for the process (then the watchdog would end
    this test's own process after ``agent_hang_timeout_s``)."""
    with pytest.raises(Exception) as excinfo:
        stalling_workers.rank_1_raises_but_never_exits(marker_dir=str(tmp_path))
    error = root_cause_error_of(excinfo)
    root = error.root_cause
    assert (root.global_rank, root.role, root.time_source) == (1, Role.CANDIDATE, TimeSource.RECORDED)
    assert root.exception_type == "builtins.ValueError"
    [victim] = error.failures[1:]
    assert (victim.global_rank, victim.role) == (0, Role.VICTIM)


def test_watchdog_ends_the_launch_when_torch_and_the_death_watcher_see_nothing(tmp_path: Path) -> None:
    with agent_process("blind_agent", tmp_path, "blind-pod-0", TIMEOUT_S) as run:
        assert run.returncode == 0, run.stderr[-3000:]  # the document is written: the exit-0 contract
    document = run.document
    assert document is not None
    assert document["type"] == "ElasticRootCauseError"
    first_line = document["report"].splitlines()[0]
    assert first_line.startswith("[root cause] rank 1 (local rank 1, group rank 0) on worker blind-pod-0 ")
    assert "ValueError: root cause on rank 1" in first_line
    by_rank = {failure["rank"]: failure for failure in document["failures"]}
    assert (by_rank[0]["role"], by_rank[0]["signal"]) == ("victim", "SIGKILL")  # it ignored SIGTERM


def test_a_worker_exiting_0_between_the_wrappers_wait_and_torchs_join_is_still_seen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A race the stress benchmark hits about once in a hundred runs (``os._exit(0)``, busy machine).

    torch's join waits on the sentinels again after the launch observer's own wait. A worker that
    ends in between would be popped by torch as a success, unseen by the observer, and the launch
    would stall. Here torch's join is made to wait for that exit itself, so the window is always hit.
    """
    real_join = torch_mp.ProcessContext.join

    def join_after_an_exit(
        self: torch_mp.ProcessContext, timeout: float | None = None, grace_period: float | None = None
    ) -> bool:
        if self.sentinels:
            multiprocessing.connection.wait(list(self.sentinels), timeout=10)
        return real_join(self, timeout, grace_period)

    monkeypatch.setattr(torch_mp.ProcessContext, "join", join_after_an_exit)
    with pytest.raises(Exception) as excinfo:
        stalling_workers.rank_1_exits_0_early(marker_dir=str(tmp_path), delay_s=1.0)
    root = root_cause_error_of(excinfo).root_cause
    assert (root.global_rank, root.exitcode, root.message) == (1, 0, EXITED_WITHOUT_RESULT)
