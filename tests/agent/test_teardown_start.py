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

from flytekitplugins_rootcause.agent.death_watcher import DeathWatcher
from flytekitplugins_rootcause.agent.launch_observer import LaunchedWorker, LaunchObserver

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
        observer = LaunchObserver(watcher)
        observer.add_worker(_worker(0, 0, dead.pid))
        observer.add_worker(_worker(0, 1, alive.pid))
        _wait_until_waitable(dead.pid)
        assert watcher.exits() == {}
        teardown_ns = observer.note_teardown(0)
        exit_ = watcher.exit_of(dead.pid)
        assert exit_ is not None and exit_.exitcode == 3
        assert exit_.exit_ns <= teardown_ns
        assert watcher.exit_of(alive.pid) is None  # a live worker is not recorded as dead
        assert observer.note_teardown(0) == teardown_ns  # the first call wins
    finally:
        watcher.close()
        assert alive.stdin is not None
        alive.stdin.close()
        alive.wait()
        dead.wait()
