"""When teardown begins, a worker already dead is no victim, whether or not a watcher thread saw it.

The watcher thread may be starved of CPU for seconds under load; a worker that died before the
agent began tearing down must still be recorded as dead *before* that moment, or the report would
call the root cause a victim of the teardown.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from rootcause_core.ordering import Role
from rootcause_engine.agent.death_watcher import DeathWatcher
from rootcause_engine.agent.diagnosis.selection import rank_failures
from rootcause_engine.agent.launch_ledger import LaunchedWorker, LaunchLedger
from rootcause_engine.agent.launch_observer import LaunchObserver
from rootcause_engine.agent.launch_record import record_launch

NEVER_S = 120.0


def _worker(attempt: int, local_rank: int, pid: int) -> LaunchedWorker:
    return LaunchedWorker(attempt, local_rank, local_rank, 0, pid, error_file="")


def _wait_until_waitable(pid: int) -> None:
    deadline = time.monotonic() + NEVER_S
    while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_a_worker_dead_before_teardown_is_recorded_before_it_without_the_watcher_thread() -> None:
    dead = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    alive = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    watcher = DeathWatcher()  # never entered: no thread, as if it never got the CPU
    try:
        ledger = LaunchLedger(watcher)
        ledger.add_worker(_worker(0, 0, dead.pid))
        ledger.add_worker(_worker(0, 1, alive.pid))
        _wait_until_waitable(dead.pid)
        assert watcher.exits() == {}
        teardown_ns = ledger.note_teardown(0)
        exit_ = watcher.exit_of(dead.pid)
        assert exit_ is not None and exit_.exitcode == 3
        assert exit_.exit_ns <= teardown_ns
        assert watcher.exit_of(alive.pid) is None  # a live worker is not recorded as dead
        assert ledger.note_teardown(0) == teardown_ns  # the first call wins
    finally:
        watcher.close()
        assert alive.stdin is not None
        alive.stdin.close()
        alive.wait()
        dead.wait()


_FAILS_WHEN_TOLD = """
import json, os, sys, time
from rootcause_engine.worker.recorder import build_error_file
sys.stdin.readline()
with open(sys.argv[1] + ".tmp", "w") as f:
    json.dump(build_error_file(RuntimeError("independent failure"), time.time_ns()), f)
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
raise SystemExit(1)
"""


def test_a_worker_that_fails_on_its_own_while_the_agent_probes_is_no_victim(tmp_path: Path) -> None:
    """Between the teardown's start and its first signal the agent probes the live workers (up to a
    second). A worker that records a failure of its own meanwhile failed before anything reached it:
    a root-cause candidate, not a victim of the teardown (two independent failures in two pods)."""
    error_file = tmp_path / "w" / "error.json"
    error_file.parent.mkdir()
    worker = subprocess.Popen([sys.executable, "-c", _FAILS_WHEN_TOLD, str(error_file)], stdin=subprocess.PIPE,
                              text=True)
    watcher = DeathWatcher()
    try:
        with watcher:
            observer = LaunchObserver(watcher, teardown_grace_s=NEVER_S, probe_before_teardown=True)
            observer.ledger.add_worker(LaunchedWorker(0, 0, 0, 0, worker.pid, str(error_file)))

            def probe_while_it_fails(attempt: int, *, asked: bool = False) -> None:
                assert worker.stdin is not None
                worker.stdin.write("fail\n")
                worker.stdin.flush()
                _wait_until_waitable(worker.pid)

            observer.teardown.probe_live_workers = probe_while_it_fails  # type: ignore[method-assign]
            observer.teardown.end_workers(0, probe=True)
            record = record_launch(observer)
            teardown_ns, signals_ns = record.teardown_ns, record.signals_ns
            assert teardown_ns is not None and signals_ns is not None and teardown_ns < signals_ns
            (failure,) = rank_failures(list(record.workers), signals_ns=signals_ns, worker="pod-1", host="h")
            assert failure.role == Role.CANDIDATE, failure
            assert failure.exitcode == 1 and failure.signal_number is None
            # judged by the teardown's start, the same record made it a victim
            (judged_early,) = rank_failures(list(record.workers), signals_ns=teardown_ns, worker="pod-1", host="h")
            assert judged_early.role == Role.VICTIM
    finally:
        worker.wait()
