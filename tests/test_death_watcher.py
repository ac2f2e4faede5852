"""The death watcher sees real processes die, with exact times, without reaping them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from flytekitplugins_rootcause.death_watcher import DeathWatcher, ProcessExit


def _spawn(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code])


def _wait_for_exit(watcher: DeathWatcher, pid: int, timeout_s: float = 10.0) -> ProcessExit:
    deadline = time.monotonic() + timeout_s
    while (seen := watcher.exit_of(pid)) is None:
        assert time.monotonic() < deadline, f"watcher never saw pid {pid} exit"
        time.sleep(0.01)
    return seen


@pytest.mark.parametrize("use_pidfd", [True, False], ids=["pidfd", "polling-fallback"])
def test_sigkill_time_and_status_are_recorded_without_reaping(use_pidfd: bool) -> None:
    if use_pidfd and not hasattr(os, "pidfd_open"):
        pytest.skip("no pidfd on this platform")
    with DeathWatcher(use_pidfd=use_pidfd) as watcher:
        proc = _spawn("import time; time.sleep(60)")
        watcher.watch(proc.pid)
        time.sleep(0.2)
        before = time.time_ns()
        os.kill(proc.pid, signal.SIGKILL)
        seen = _wait_for_exit(watcher, proc.pid)
        after = time.time_ns()
        assert seen.signal_number == signal.SIGKILL and seen.exitcode is None
        tolerance = 0 if use_pidfd else 50_000_000
        assert before <= seen.exit_ns <= after + tolerance
        # the zombie is still there for its owner (torch) to reap
        assert proc.wait(timeout=5) == -signal.SIGKILL


def test_exit_codes_and_several_processes() -> None:
    with DeathWatcher() as watcher:
        procs = [_spawn(f"import sys, time; time.sleep(0.{i}); sys.exit({i})") for i in range(1, 4)]
        for proc in procs:
            watcher.watch(proc.pid)
        exits = [_wait_for_exit(watcher, proc.pid) for proc in procs]
        assert [e.exitcode for e in exits] == [1, 2, 3]
        assert exits[0].exit_ns < exits[1].exit_ns < exits[2].exit_ns
        for proc in procs:
            proc.wait(timeout=5)


def test_already_reaped_process_is_recorded_without_status() -> None:
    with DeathWatcher() as watcher:
        proc = _spawn("pass")
        proc.wait(timeout=10)
        watcher.watch(proc.pid)
        seen = _wait_for_exit(watcher, proc.pid)
        assert (seen.exitcode, seen.signal_number) == (None, None)


def test_close_is_idempotent_and_stops_the_thread() -> None:
    watcher = DeathWatcher()
    with watcher:
        pass
    watcher.close()
    assert watcher.exits() == {}
