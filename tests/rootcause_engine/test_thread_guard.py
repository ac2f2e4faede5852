"""The thread kit every long-lived thread and callback of the product runs on (``rootcause_engine/thread_guard.py``).

Real threads throughout: a :class:`GuardedLoop` runs its duties each at its own interval, outlives a
step that raises, says its death to every duty, and starts again with the duties that outlive one;
:func:`run_soon` runs callbacks on a few daemon threads, a blocked one holding only its own thread, a
forked child gets a pool of its own, and the interpreter's exit never waits for a stuck callback.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time

import pytest

from rootcause_engine import thread_guard
from rootcause_engine.thread_guard import GuardedLoop, LoopGuard, run_soon, wait_for
from testbed.sync import wait_until

pytestmark = pytest.mark.timeout(120)

#: Generous: a busy two-core machine may hold a thread for seconds.
WAIT_S = 60.0
GUARD_LOGGER = "rootcause_engine.thread_guard"


class _Stop(BaseException):
    """Ends a loop's thread (no ``Exception``: no step survives it)."""


# --- GuardedLoop ---------------------------------------------------------------------------------


def test_a_loop_runs_its_step_every_interval_and_stop_waits_for_it() -> None:
    steps: list[str] = []
    loop = GuardedLoop("rootcause-test-loop", lambda: steps.append(threading.current_thread().name), interval_s=0.01)
    loop.start()
    try:
        assert wait_until(lambda: len(steps) >= 5, WAIT_S)
        assert set(steps) == {"rootcause-test-loop"}
    finally:
        loop.stop(WAIT_S)
    assert not loop.running and loop.stopping
    count = len(steps)
    time.sleep(0.05)
    assert len(steps) == count  # nothing after the stop


def test_a_step_says_when_it_is_due_again_and_wake_ends_a_wait() -> None:
    steps: list[float] = []

    def step() -> float:
        steps.append(time.monotonic())
        return 3600.0  # not again for an hour, unless woken

    loop = GuardedLoop("rootcause-test-loop", step, interval_s=0.01, first_wait=False).start()
    try:
        assert wait_until(lambda: len(steps) == 1, WAIT_S)
        time.sleep(0.1)
        assert len(steps) == 1
        loop.wake()  # a wake runs every duty now, due or not
        assert wait_until(lambda: len(steps) == 2, WAIT_S)
        time.sleep(0.1)
        assert len(steps) == 2  # then the step's own pause holds again
    finally:
        loop.stop(WAIT_S)


def test_a_step_that_raises_costs_that_step_only_and_is_noted(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[int] = []

    def step() -> None:
        calls.append(1)
        if len(calls) <= 3:
            raise UnicodeError("label too long")

    loop = GuardedLoop("rootcause-test-loop", step, interval_s=0.01, stopped="nothing")
    with caplog.at_level(logging.DEBUG, logger=GUARD_LOGGER):
        loop.start()
        try:
            assert wait_until(lambda: len(calls) >= 6, WAIT_S)
            assert loop.running
        finally:
            loop.stop(WAIT_S)
    errors = [record for record in caplog.records if record.levelno == logging.ERROR and record.exc_info]
    assert len(errors) == 1  # one traceback per kind of error
    note = loop.note()
    assert note is not None and "test loop failed at " in note and "(3 iterations failed in all)" in note
    assert "stopped" not in note


def test_duties_run_each_at_its_own_interval_and_leave_when_dropped() -> None:
    fast: list[int] = []
    slow: list[int] = []
    loop = GuardedLoop("rootcause-test-loop").start()
    try:
        fast_duty = loop.every(0.01, lambda: fast.append(1), guard=LoopGuard("fast"), first_wait=False)
        loop.every(0.5, lambda: slow.append(1), guard=LoopGuard("slow"))
        assert wait_until(lambda: len(fast) >= 30, WAIT_S)
        assert len(slow) <= len(fast) // 10 + 1
        loop.drop(fast_duty)
        time.sleep(0.1)  # a step under way ends first
        count = len(fast)
        assert wait_until(lambda: len(slow) >= 2, WAIT_S)
        assert len(fast) == count
    finally:
        loop.stop(WAIT_S)


def test_a_death_goes_to_every_duty_and_a_new_thread_takes_on_those_that_outlive_it(
        caplog: pytest.LogCaptureFixture) -> None:
    end = threading.Event()
    kept: list[int] = []
    gone: list[int] = []
    told: list[str] = []

    def kept_step() -> None:
        kept.append(1)
        if end.is_set():
            end.clear()
            raise _Stop("the test ends this thread")

    kept_guard, gone_guard = LoopGuard("kept duty", stopped="kept"), LoopGuard("gone duty", stopped="gone")
    loop = GuardedLoop("rootcause-test-loop", on_death=lambda error: told.append(f"loop: {error}"))
    loop.every(0.01, kept_step, guard=kept_guard, on_death=lambda error: told.append("kept"))
    loop.every(0.01, lambda: gone.append(1), guard=gone_guard, on_death=lambda error: told.append("gone"),
               outlives_death=False)
    with caplog.at_level(logging.DEBUG, logger=GUARD_LOGGER):
        loop.start()
        assert wait_until(lambda: kept and gone, WAIT_S)
        end.set()
        assert wait_until(lambda: not loop.running, WAIT_S)
    assert told == ["kept", "gone", "loop: the test ends this thread"]
    [death] = [record for record in caplog.records if record.levelno == logging.CRITICAL]
    assert "rootcause-test-loop" in death.getMessage() and death.exc_info[0] is _Stop  # type: ignore[index]
    for guard in (kept_guard, gone_guard, loop.guard):
        note = guard.note()
        assert note is not None and " stopped at " in note and "_Stop" in note

    loop.ensure_running()  # started again: the kept duty only
    try:
        seen_kept, seen_gone = len(kept), len(gone)
        assert wait_until(lambda: len(kept) >= seen_kept + 5, WAIT_S)
        assert len(gone) == seen_gone
    finally:
        loop.stop(WAIT_S)


def test_a_loop_stopped_from_its_own_step_ends_after_it() -> None:
    loop: GuardedLoop
    steps: list[int] = []

    def step() -> None:
        steps.append(1)
        loop.stop(WAIT_S)  # from the loop's own thread: no join, the thread ends after the step

    loop = GuardedLoop("rootcause-test-loop", step, interval_s=0.01)
    loop.start()
    assert wait_until(lambda: not loop.running, WAIT_S)
    assert steps == [1]


def test_at_end_runs_on_the_thread_whether_stopped_or_dead() -> None:
    ended: list[str] = []

    def broken() -> None:
        raise _Stop("dead")

    stopped = GuardedLoop("rootcause-test-loop", lambda: None, interval_s=0.01,
                          at_end=lambda: ended.append(threading.current_thread().name)).start()
    stopped.stop(WAIT_S)
    dead = GuardedLoop("rootcause-test-loop", broken, interval_s=0.01, first_wait=False,
                       at_end=lambda: ended.append("dead")).start()
    assert wait_until(lambda: not dead.running, WAIT_S)
    assert ended == ["rootcause-test-loop", "dead"]


# --- run_soon ------------------------------------------------------------------------------------


def test_a_callback_runs_on_a_callback_thread_and_its_future_holds_what_it_returned() -> None:
    done = run_soon(lambda: threading.current_thread().name, name="test")
    assert done.result(WAIT_S) == "rootcause-callback"
    assert threading.current_thread().name != "rootcause-callback"


def test_a_callback_that_raises_is_logged_and_kept_on_its_future(caplog: pytest.LogCaptureFixture) -> None:
    def broken() -> None:
        raise ValueError("a callback's own failure")

    with caplog.at_level(logging.ERROR, logger=GUARD_LOGGER):
        done = run_soon(broken, name="test callback")
        assert wait_for(done, WAIT_S)
    assert isinstance(done.exception(), ValueError)
    assert any("test callback: the callback failed" in record.getMessage() for record in caplog.records)


def test_callbacks_never_wait_behind_blocked_ones_and_idle_threads_are_reused() -> None:
    """However many callbacks block (teardowns, settlings, store writes), the next one runs at once; once
    they are done, their threads take the next callbacks instead of new threads being made."""
    release = threading.Event()
    blocked = [run_soon(lambda: release.wait(WAIT_S), name="blocked") for _ in range(12)]
    try:
        assert run_soon(lambda: "ran", name="behind twelve blocked").result(WAIT_S) == "ran"
    finally:
        release.set()
    assert all(done.result(WAIT_S) for done in blocked)
    threads = {thread for thread in threading.enumerate() if thread.name == "rootcause-callback"}
    for _ in range(30):  # one at a time: an idle thread takes each
        assert run_soon(lambda: 1, name="again").result(WAIT_S) == 1
    assert {thread for thread in threading.enumerate() if thread.name == "rootcause-callback"} <= threads


def test_one_blocked_callback_does_not_hold_the_next() -> None:
    release = threading.Event()
    blocked = run_soon(lambda: release.wait(WAIT_S), name="blocked")
    try:
        assert run_soon(lambda: "free", name="next").result(WAIT_S) == "free"
    finally:
        release.set()
    assert blocked.result(WAIT_S)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_forked_child_gets_a_pool_of_its_own() -> None:
    """The parent's callback threads do not exist in a forked child: its callbacks still run there."""
    assert run_soon(lambda: 1, name="parent").result(WAIT_S) == 1  # the parent's pool has threads
    parent_pool = thread_guard._pool
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only os._exit leaves it
        code = 1
        try:
            answer = run_soon(lambda: os.getpid(), name="child").result(WAIT_S)
            code = 0 if answer == os.getpid() and thread_guard._pool is not parent_pool else 2
            os.write(write, b"ok" if code == 0 else b"no")
        finally:
            os._exit(code)
    os.close(write)
    try:
        _, status = os.waitpid(pid, 0)
        said = os.read(read, 16)
    finally:
        os.close(read)
    assert os.waitstatus_to_exitcode(status) == 0 and said == b"ok"
    assert thread_guard._pool is parent_pool


_STUCK_AT_EXIT = """
import sys, threading, time
from rootcause_engine.thread_guard import GuardedLoop, LoopGuard, run_soon
started = threading.Event()
run_soon(lambda: (started.set(), time.sleep(3600)), name="stuck")
loop = GuardedLoop("rootcause-test-loop", lambda: time.sleep(3600), interval_s=0.0, first_wait=False).start()
started.wait(60)
print("leaving", flush=True)
"""


def test_the_interpreter_s_exit_never_waits_for_a_stuck_callback_nor_loop() -> None:
    started = time.monotonic()
    run = subprocess.run([sys.executable, "-c", _STUCK_AT_EXIT], capture_output=True, text=True, timeout=90)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip() == "leaving"
    assert time.monotonic() - started < 60


def test_wait_for_says_whether_a_future_is_done_in_time() -> None:
    release = threading.Event()
    blocked = run_soon(lambda: release.wait(WAIT_S), name="blocked")
    try:
        assert not wait_for(blocked, 0.05)
    finally:
        release.set()
    assert wait_for(blocked, WAIT_S) and wait_for(None, 0)
