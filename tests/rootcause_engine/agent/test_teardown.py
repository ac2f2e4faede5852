"""Teardown by pid (``rootcause_engine/agent/teardown.py``): SIGTERM, the grace, SIGKILL, the spared processes'
later SIGTERM, and the pids left over, with real child processes and real signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest

from rootcause_engine.agent.teardown import spare_s, terminate_then_kill

IGNORES_SIGTERM = (
    "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); "
    "time.sleep(60)"
)


def _has_exited(pid: int) -> bool:
    """Whether our child ``pid`` has ended, asked of the kernel without reaping it.

    Not the death watcher's thread: whether that thread has run yet is scheduler luck, and a busy
    machine would make a process that is long gone look alive to ``terminate_then_kill``.
    """
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


@pytest.fixture
def start() -> Iterator[Callable[[str], subprocess.Popen[str]]]:
    """Start ``python -c code`` (with a pipe from its stdout); every one is killed and reaped at the end."""
    started: list[subprocess.Popen[str]] = []

    def start_one(code: str) -> subprocess.Popen[str]:
        process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        started.append(process)
        return process

    yield start_one
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait()
        assert process.stdout is not None
        process.stdout.close()


def _ready(process: subprocess.Popen[str]) -> None:
    assert process.stdout is not None and process.stdout.readline() == "ready\n"


def test_terminate_then_kill_ends_a_sigterm_ignoring_process_by_sigkill() -> None:
    polite = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    stubborn = subprocess.Popen([sys.executable, "-c", IGNORES_SIGTERM], stdout=subprocess.PIPE, text=True)
    try:
        assert stubborn.stdout is not None and stubborn.stdout.readline() == "ready\n"
        started = time.monotonic()
        left = terminate_then_kill([polite.pid, stubborn.pid], grace_s=0.5, exited=_has_exited)
        assert left == []
        # SIGKILL came only after the grace: the stubborn one outlived it
        assert time.monotonic() - started >= 0.5
        assert polite.wait() == -signal.SIGTERM
        assert stubborn.wait() == -signal.SIGKILL
    finally:
        for proc in (polite, stubborn):
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        assert stubborn.stdout is not None
        stubborn.stdout.close()


@pytest.mark.parametrize(("grace_s", "spared_s"), [(0.0, 0.0), (1.0, 0.5), (3.0, 1.5), (4.0, 2.0), (60.0, 2.0)])
def test_a_process_on_its_way_out_is_spared_half_the_grace_at_most_2_s(grace_s: float, spared_s: float) -> None:
    assert spare_s(grace_s) == spared_s


def _sigterm_pending(pid: int) -> bool:
    """Whether a SIGTERM waits, blocked, for process ``pid`` (its shared pending set in ``/proc``)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        pending = next(line for line in status if line.startswith("ShdPnd:"))
    return bool(int(pending.split()[1], 16) & (1 << (signal.SIGTERM - 1)))


def test_a_spared_process_gets_its_sigterm_only_after_the_others_and_sigkill_after_the_grace(
    start: Callable[[str], subprocess.Popen[str]],
) -> None:
    """The spared process blocks SIGTERM, so a SIGTERM sent to it stays pending where ``/proc`` shows it."""
    polite = start("import time; time.sleep(60)")
    spared = start("import signal, time; signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM}); "
                   "print('ready', flush=True); time.sleep(60)")
    _ready(spared)
    looks = 0
    pending: list[bool] = []  # at each look at the spared process after the first: has its SIGTERM come?

    def exited(pid: int) -> bool:
        nonlocal looks
        looks += 1
        if pid == spared.pid and looks > 2 and not _has_exited(pid):
            if not pending:  # the first look after the signals went out: wait until the polite one is gone
                os.waitid(os.P_PID, polite.pid, os.WEXITED | os.WNOWAIT)
            pending.append(_sigterm_pending(pid))
        return _has_exited(pid)

    left = terminate_then_kill([polite.pid, spared.pid], grace_s=0.2, exited=exited, spared=[spared.pid])
    assert left == []
    assert polite.wait() == -signal.SIGTERM
    assert spared.wait() == -signal.SIGKILL
    # no SIGTERM yet when the other one had already ended by its own; then it came, before the SIGKILL
    assert pending[0] is False and pending[-1] is True
    assert pending == sorted(pending)


def test_a_pid_already_gone_gets_no_signal() -> None:
    """The caller's kernel view decides: a pid it calls gone is left alone, whatever it is now."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert terminate_then_kill([process.pid], grace_s=0.2, exited=lambda pid: True) == []
        assert process.poll() is None and not _has_exited(process.pid)
    finally:
        process.kill()
        assert process.wait() == -signal.SIGKILL  # our kill, not the teardown's SIGTERM


def test_a_process_that_ends_between_the_look_and_the_signal_is_no_error() -> None:
    """Its pid is free by the time the signal goes (``ProcessLookupError``): it counts as gone."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()  # reaped: the pid names no process now
    looks: list[int] = []

    def exited(pid: int) -> bool:
        looks.append(pid)
        return len(looks) > 1  # alive at the first look, gone at the next

    assert terminate_then_kill([process.pid], grace_s=0.2, exited=exited) == []
    assert looks[:2] == [process.pid, process.pid]


def test_a_process_that_outlives_sigkill_is_returned_to_the_caller(
    start: Callable[[str], subprocess.Popen[str]],
) -> None:
    """A process in uninterruptible sleep outlives SIGKILL for a while; here the caller's view says so
    (it never sees the exit), and the pid comes back to be reported."""
    stubborn, polite = start(IGNORES_SIGTERM), start("import time; time.sleep(60)")
    _ready(stubborn)
    never_gone = {stubborn.pid}

    def exited(pid: int) -> bool:
        return pid not in never_gone and _has_exited(pid)

    assert terminate_then_kill([stubborn.pid, polite.pid], grace_s=0.05, exited=exited) == [stubborn.pid]
    assert stubborn.wait() == -signal.SIGKILL  # it did get the SIGKILL
    assert polite.wait() == -signal.SIGTERM
