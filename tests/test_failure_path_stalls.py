"""The failure path never turns a failure into a hang (issue #11).

- A function worker that exits with code 0 without returning its result (``os._exit(0)``; torch's
  worker wrapper also turns a KeyboardInterrupt into exit code 0) is a failure: torch's own join
  counts it as a success, and its monitor loop then reads HEALTHY while any other worker lives.
- Defence in depth: with torch's monitor path made to believe every worker runs *and* the death
  watcher's thread never started, the agent watchdog (asking the kernel itself) still ends the pod
  with the root-cause report.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from backend_reader.ordering import Role, TimeSource
from flytekitplugins_rootcause.selection import EXITED_WITHOUT_RESULT
from flytekitplugins_rootcause.watchdog import AGENT_HUNG_EXIT_CODE
from tests.elastic_tasks import early_exit
from tests.test_elastic_rootcause_launch import _root_cause_error

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 240


def test_a_worker_exiting_0_before_returning_is_the_root_cause(tmp_path: Path) -> None:
    with pytest.raises(Exception) as excinfo:
        early_exit.rank_1_exits_0_early(marker_dir=str(tmp_path))
    error = _root_cause_error(excinfo)
    root = error.root_cause
    assert (root.global_rank, root.role, root.exitcode) == (1, Role.CANDIDATE, 0)
    assert root.time_source == TimeSource.OBSERVED
    assert root.message == EXITED_WITHOUT_RESULT
    assert error.report.splitlines()[0].startswith("[root cause] rank 1 (local rank 1, group rank 0) on worker ")
    [victim] = error.failures[1:]
    # rank 0 ignored SIGTERM: the agent's teardown SIGKILLed it after the grace period
    assert (victim.global_rank, victim.role, victim.signal_name) == (0, Role.VICTIM, "SIGKILL")


def test_watchdog_ends_the_launch_when_torch_and_the_death_watcher_see_nothing(tmp_path: Path) -> None:
    out, markers = tmp_path / "root-cause.json", tmp_path / "markers"
    markers.mkdir()
    env = {**os.environ, "FLYTE_INTERNAL_WORKER_NAME": "blind-pod-0"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "tests.watchdog_tasks.blind_agent", str(out), str(markers)]
    with subprocess.Popen(
        command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    ) as agent:  # fmt: skip
        try:
            try:
                _, stderr = agent.communicate(timeout=TIMEOUT_S)
            except subprocess.TimeoutExpired:
                pytest.fail(f"the blind agent was not ended within {TIMEOUT_S} s")
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(agent.pid, signal.SIGKILL)
            agent.communicate()
    assert agent.returncode == AGENT_HUNG_EXIT_CODE, stderr[-3000:]
    document = json.loads(out.read_text())
    assert document["type"] == "ElasticRootCauseError"
    first_line = document["report"].splitlines()[0]
    assert first_line.startswith("[root cause] rank 1 (local rank 1, group rank 0) on worker blind-pod-0 ")
    assert "ValueError: root cause on rank 1" in first_line
    by_rank = {failure["rank"]: failure for failure in document["failures"]}
    assert (by_rank[0]["role"], by_rank[0]["signal"]) == ("victim", "SIGKILL")  # it ignored SIGTERM
