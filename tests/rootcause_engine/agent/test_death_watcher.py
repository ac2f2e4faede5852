"""The death watcher sees real processes die, with exact times, without reaping them.

Nothing here depends on how fast the machine is: processes end when the test tells them to (a line
on their stdin, a signal), never after a sleep, and each time is checked against instants the test
itself took around the event, never against a wall-clock bound.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from rootcause_engine.agent.death_watcher import DeathWatcher, ProcessExit, start_ticks

#: Only a safety net against a watcher that never reports: a working one reports far sooner.
NEVER_S = 120.0
#: A child that says it is running, then exits with the code it reads from stdin.
EXIT_WITH_CODE_FROM_STDIN = "import sys; print('ready', flush=True); sys.exit(int(sys.stdin.readline()))"


def _spawn_waiting_child() -> subprocess.Popen[str]:
    """A running child that exits only when told; returns once it is running."""
    proc = subprocess.Popen(
        [sys.executable, "-c", EXIT_WITH_CODE_FROM_STDIN], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    proc.stdout.close()  # it writes nothing more
    return proc


def _tell_to_exit(proc: subprocess.Popen[str], code: int) -> None:
    assert proc.stdin is not None
    proc.stdin.write(f"{code}\n")
    proc.stdin.close()


def _wait_for_exit(watcher: DeathWatcher, pid: int) -> ProcessExit:
    deadline = time.monotonic() + NEVER_S
    while (seen := watcher.exit_of(pid)) is None:
        assert time.monotonic() < deadline, f"watcher never saw pid {pid} exit"
        time.sleep(0.01)
    return seen


def _open_fds() -> dict[str, str]:
    """This process's open file descriptors and what each points to."""
    fds = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except FileNotFoundError:  # the descriptor listdir itself used
            continue
    return fds


@pytest.mark.parametrize("use_pidfd", [True, False], ids=["pidfd", "polling-fallback"])
def test_sigkill_time_and_status_are_recorded_without_reaping(use_pidfd: bool) -> None:
    if use_pidfd and not hasattr(os, "pidfd_open"):
        pytest.skip("no pidfd on this platform")
    with DeathWatcher(use_pidfd=use_pidfd) as watcher:
        proc = _spawn_waiting_child()
        watching_ns = time.time_ns()
        watcher.watch(proc.pid)
        before_kill_ns = time.time_ns()
        os.kill(proc.pid, signal.SIGKILL)
        seen = _wait_for_exit(watcher, proc.pid)
        seen_ns = time.time_ns()
        assert seen.signal_number == signal.SIGKILL and seen.exitcode is None
        if use_pidfd:
            # the pidfd wakes the watcher when the process has died: after the kill, before we saw it
            assert before_kill_ns <= seen.exit_ns <= seen_ns
        else:
            # polling stamps the sweep that found it dead, whose clock reading may precede the kill
            # (the fallback's documented coarseness); it is still a sweep after the watch began
            assert watching_ns <= seen.exit_ns <= seen_ns
        # the zombie is still there for its owner (torch) to reap
        assert proc.wait() == -signal.SIGKILL
        assert proc.stdin is not None
        proc.stdin.close()


def test_exit_codes_and_several_processes() -> None:
    """Three processes watched at once, released one by one: codes and the order of their times."""
    with DeathWatcher() as watcher:
        procs = [_spawn_waiting_child() for _ in range(3)]
        for proc in procs:
            watcher.watch(proc.pid)
        exits = []
        for code, proc in enumerate(procs, start=1):
            _tell_to_exit(proc, code)  # only once the previous exit was recorded
            exits.append(_wait_for_exit(watcher, proc.pid))
        assert [e.exitcode for e in exits] == [1, 2, 3]
        assert [e.signal_number for e in exits] == [None, None, None]
        assert exits[0].exit_ns < exits[1].exit_ns < exits[2].exit_ns
        assert [proc.wait() for proc in procs] == [1, 2, 3]  # none was reaped by the watcher


def test_already_reaped_process_is_recorded_without_status() -> None:
    with DeathWatcher() as watcher:
        proc = subprocess.Popen([sys.executable, "-c", "pass"])
        proc.wait()
        watcher.watch(proc.pid)
        seen = _wait_for_exit(watcher, proc.pid)
        assert (seen.exitcode, seen.signal_number) == (None, None)


@pytest.mark.parametrize("use_pidfd", [True, False], ids=["pidfd", "polling-fallback"])
def test_close_is_idempotent_and_stops_the_thread(use_pidfd: bool) -> None:
    """Closing while a watched process still runs: the thread ends and every descriptor it held is closed."""
    if use_pidfd and not hasattr(os, "pidfd_open"):
        pytest.skip("no pidfd on this platform")
    fds_before = _open_fds()
    threads_before = set(threading.enumerate())
    proc = _spawn_waiting_child()
    fds_before |= _open_fds()  # the child's pipes are the test's, not the watcher's
    try:
        watcher = DeathWatcher(use_pidfd=use_pidfd)
        with watcher:
            (thread,) = set(threading.enumerate()) - threads_before
            watcher.watch(proc.pid)
            if use_pidfd:  # the watcher holds a pidfd for the live child
                deadline = time.monotonic() + NEVER_S
                while not any("pidfd" in target for target in _open_fds().values()):
                    assert time.monotonic() < deadline, "the watcher never opened a pidfd"
                    time.sleep(0.01)
        assert not thread.is_alive()
        # wake-up pipe and pidfds closed: no descriptor is open now that was not before (other tests' threads
        # still ending may close theirs meanwhile)
        assert {fd: target for fd, target in _open_fds().items() if fds_before.get(fd) != target} == {}
        watcher.close()  # a second close is harmless
        assert watcher.exits() == {}  # the child is still running: nothing was recorded
    finally:
        _tell_to_exit(proc, 0)
        proc.wait()


@pytest.mark.parametrize("use_pidfd", [True, False], ids=["pidfd", "polling-fallback"])
def test_paused_runs_no_thread_and_loses_no_exit(use_pidfd: bool) -> None:
    """The agent forks workers inside ``paused()``: no watcher thread may exist there, and an exit
    that happens meanwhile (of a pid watched before or during the pause) is recorded after it."""
    if use_pidfd and not hasattr(os, "pidfd_open"):
        pytest.skip("no pidfd on this platform")
    before, during = _spawn_waiting_child(), _spawn_waiting_child()
    try:
        with DeathWatcher(use_pidfd=use_pidfd) as watcher:
            watcher.watch(before.pid)
            with watcher.paused():
                assert not [t for t in threading.enumerate() if t.name == "rootcause-death-watcher"]
                watcher.watch(during.pid)
                _tell_to_exit(before, 3)
                _tell_to_exit(during, 4)
                before.wait()  # reaped here; the watcher then records it without a status
                assert watcher.exits() == {}
            assert [t for t in threading.enumerate() if t.name == "rootcause-death-watcher"]
            assert _wait_for_exit(watcher, during.pid).exitcode == 4
            assert _wait_for_exit(watcher, before.pid).pid == before.pid
    finally:
        for proc in (before, during):
            if proc.poll() is None:
                _tell_to_exit(proc, 0)
            proc.wait()


def test_an_exit_seen_earlier_by_another_observer_keeps_the_earlier_time_and_the_status() -> None:
    """The agent's join sees a worker's sentinel close before the kernel makes it waitable (and before
    a starved watcher thread stamps it): ``note_ended`` records the sentinel's time, and a later stamp
    from the watcher thread neither moves it later nor loses the status."""
    proc = _spawn_waiting_child()
    with DeathWatcher() as watcher:
        watcher.watch(proc.pid)
        seen_ns = time.time_ns()
        _tell_to_exit(proc, 7)
        from_watcher = _wait_for_exit(watcher, proc.pid)
        assert from_watcher.exit_ns > seen_ns  # the watcher stamps when it woke, after the death
        noted = watcher.note_ended(proc.pid, seen_ns)
        assert noted == ProcessExit(proc.pid, seen_ns, 7, None, from_watcher.started)
        assert watcher.exit_of(proc.pid) == noted
        watcher.note_ended(proc.pid, from_watcher.exit_ns)  # a later sighting moves nothing
        assert watcher.exit_of(proc.pid) == noted
    proc.wait()


def test_note_ended_waits_for_the_status_of_a_process_still_exiting() -> None:
    """Without the watcher thread (it may be starved), ``note_ended`` itself reads the status once the
    kernel has it, and records the time it was given, not the time the status became readable."""
    proc = _spawn_waiting_child()
    watcher = DeathWatcher()  # never entered: no thread
    try:
        seen_ns = time.time_ns()
        _tell_to_exit(proc, 5)
        noted = watcher.note_ended(proc.pid, seen_ns, status_wait_s=NEVER_S)
        assert noted == ProcessExit(proc.pid, seen_ns, 5, None, start_ticks(proc.pid))
    finally:
        watcher.close()
        proc.wait()
