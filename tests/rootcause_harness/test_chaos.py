"""``rootcause_harness/chaos.py``: the chaos soak's pod command line (a pid namespace of its own) and the
agent patch that hands a restart's workers the pids of earlier ones."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from rootcause_harness import chaos
from rootcause_harness.chaos import NS_LAST_PID, PID_REUSE_LINE, REUSE_PIDS_VARIABLE, arm_pid_reuse, own_pid_namespace


def test_a_pod_runs_under_unshare_with_its_first_pid_and_the_reuse_variable() -> None:
    args = own_pid_namespace(["python", "-m", "entry", "--x"], 300)
    assert args[:7] == ["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", args[6]]
    script = args[6]
    assert script == f'echo "$0" > {NS_LAST_PID} && {REUSE_PIDS_VARIABLE}=1 "$@"'
    assert args[7:] == ["299", "python", "-m", "entry", "--x"]


def test_the_shell_script_runs_the_pod_with_the_variable_set_and_its_own_args(tmp_path: Path) -> None:
    """The wrapper's shell script, with its ``ns_last_pid`` write pointed at a file: ``$0`` is written,
    the args run as given, with the variable set, and their exit is the script's."""
    args = own_pid_namespace(["sh", "-c", f'echo "$@ ${REUSE_PIDS_VARIABLE}"; exit 7', "sh", "a b", "c"], 42)
    target = tmp_path / "ns_last_pid"
    script = args[6].replace(str(NS_LAST_PID), str(target))
    run = subprocess.run(["sh", "-c", script, *args[7:]], capture_output=True, text=True, timeout=30)
    assert (run.returncode, run.stdout) == (7, "a b c 1\n")
    assert target.read_text() == "41\n"


def test_arming_does_nothing_outside_a_soak_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

    monkeypatch.delenv(REUSE_PIDS_VARIABLE, raising=False)
    original = LocalElasticAgent._start_workers
    arm_pid_reuse()
    monkeypatch.setenv(REUSE_PIDS_VARIABLE, "0")
    arm_pid_reuse()
    assert LocalElasticAgent._start_workers is original


def test_a_restarts_workers_get_the_lowest_earlier_pid_next(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """torch's ``_start_workers`` stood in for by one returning given pids: before the second start,
    ``ns_last_pid`` holds the lowest pid of the first start less one, and the start's line is printed."""
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

    starts = iter([{0: 120, 1: 121}, {0: 120, 1: 130}])
    seen_ns_last_pid: list[str | None] = []
    last_pid = tmp_path / "ns_last_pid"

    def start_workers(agent: Any, worker_group: Any) -> dict[int, int]:
        seen_ns_last_pid.append(last_pid.read_text() if last_pid.exists() else None)
        return next(starts)

    monkeypatch.setattr(LocalElasticAgent, "_start_workers", start_workers)
    monkeypatch.setattr(chaos, "NS_LAST_PID", last_pid)
    monkeypatch.setenv(REUSE_PIDS_VARIABLE, "1")
    arm_pid_reuse()
    patched = LocalElasticAgent._start_workers
    assert patched is not start_workers
    assert patched(None, None) == {0: 120, 1: 121}
    assert capsys.readouterr().err == ""  # the first start reuses nothing
    assert patched(None, None) == {0: 120, 1: 130}
    assert seen_ns_last_pid == [None, "119"]
    assert capsys.readouterr().err == f"{PID_REUSE_LINE}: pids [120, 130], earlier [120, 121], reused [120]\n"
