"""A long-lived thread that meets an error nobody expected goes on, or says it died (issue 50, item 4).

Each thread of the agent (the watchdog, the death watcher, the hang watch, the store client) and the
soft-restart world watcher of a worker, run for real (real child processes, a real ``TCPStore`` on
loopback): one of its iterations raises once (``UnicodeError``, as the IDNA codec does on a hostile
host name), and the thread still does its job afterwards; the traceback is logged once per kind of
error and kept for the pod's report. A thread that dies anyway is logged at critical level and said
in its owner's note (``rootcause_engine/thread_guard.py``).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import torch.distributed as dist

from rootcause_core.collectives import CollectivePosition
from rootcause_engine import soft_restart, thread_guard
from rootcause_engine.agent import death_watcher as death_watcher_module
from rootcause_engine.agent import hang_watch as hang_watch_module
from rootcause_engine.agent import watchdog as watchdog_module
from rootcause_engine.agent.bounded_store import BoundedStore, StoreUnresponsive
from rootcause_engine.agent.death_watcher import DeathWatcher
from rootcause_engine.agent.diagnosis.pipeline import Diagnosis
from rootcause_engine.agent.diagnosis.stalled_rank import PeerWait, waits_text
from rootcause_engine.agent.hang_watch import HangSettings, HangWatch
from rootcause_engine.agent.launch_ledger import LaunchedWorker
from rootcause_engine.agent.launch_observer import LaunchObserver
from rootcause_engine.agent.watchdog import AGENT_HUNG_EXIT_CODE, AgentWatchdog, WatchdogSettings
from rootcause_engine.thread_guard import LoopGuard
from rootcause_engine.worker.progress_beacon import GroupProgress
from testbed.sync import wait_until
from testbed.tcp_store import client
from tests.rootcause_engine.agent.test_hang_watch import _SLEEP, _Ledger, _Peers, _start, _worker

pytestmark = pytest.mark.timeout(180)

#: Generous: a busy two-core machine may hold a thread for seconds.
WAIT_S = 60.0
S = 1_000_000_000
GUARD_LOGGER = "rootcause_engine.thread_guard"


def _raises_first(real: Callable[..., Any], times: int = 1) -> tuple[Callable[..., Any], list[int]]:
    """``real``, except that its first ``times`` calls raise ``UnicodeError``; the calls so far."""
    calls: list[int] = []

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) <= times:
            raise UnicodeError("label too long (a bug no check foresaw)")
        return real(*args, **kwargs)

    return wrapped, calls


def _tracebacks(caplog: pytest.LogCaptureFixture, level: int, name: str) -> list[logging.LogRecord]:
    return [record for record in caplog.records
            if record.levelno == level and record.exc_info and name in record.getMessage()]


class _Stop(BaseException):
    """What a test ends a thread with (no ``Exception``: no iteration survives it)."""


class _Broken(threading.Event):
    """A loop's wake-up event whose wait raises: the loop itself breaks, outside any one iteration."""

    def wait(self, timeout: float | None = None) -> bool:
        raise RuntimeError("the loop itself broke")


# --- the agent watchdog --------------------------------------------------------------------------


def test_a_watchdog_look_that_raises_costs_that_look_and_the_watchdog_still_fires(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The first look raises: the watchdog (which used to stop there, leaving a hung agent hanging)
    still finds the hang, fires, and its report says that a look failed."""
    broken, calls = _raises_first(watchdog_module.take_snapshot)
    monkeypatch.setattr(watchdog_module, "take_snapshot", broken)
    settings = WatchdogSettings(interval_s=0.05, hang_timeout_s=0.5, teardown_grace_s=1.0, sink_timeout_s=5.0)
    exits: list[int] = []
    reported: list[Diagnosis] = []

    def error_of(diagnosis: Diagnosis) -> BaseException:
        reported.append(diagnosis)
        return RuntimeError(diagnosis.report)

    worker = subprocess.Popen(["/bin/sh", "-c", "exit 1"])
    try:
        with caplog.at_level(logging.DEBUG, logger=GUARD_LOGGER), DeathWatcher() as watcher:
            observer = LaunchObserver(watcher, teardown_grace_s=1.0)
            with AgentWatchdog(observer, settings, error_of=error_of, exit_process=exits.append):
                observer.ledger.add_worker(LaunchedWorker(0, 0, 0, 0, worker.pid, ""))
                assert wait_until(lambda: exits, WAIT_S), "the watchdog never fired"
    finally:
        worker.wait()
    assert calls and exits == [AGENT_HUNG_EXIT_CODE]  # no failure sink in a test: nothing written
    [diagnosis] = reported
    assert "agent watchdog failed at " in diagnosis.report and "UnicodeError: label too long" in diagnosis.report
    [traceback] = _tracebacks(caplog, logging.ERROR, "agent watchdog")
    assert traceback.exc_info[0] is UnicodeError  # type: ignore[index]


def test_a_watchdog_thread_that_dies_anyway_is_logged_critical_and_noted(caplog: pytest.LogCaptureFixture) -> None:
    settings = WatchdogSettings(interval_s=0.05, hang_timeout_s=60.0, teardown_grace_s=1.0)
    with caplog.at_level(logging.DEBUG, logger=GUARD_LOGGER), DeathWatcher() as watcher:
        watchdog = AgentWatchdog(LaunchObserver(watcher), settings, error_of=RuntimeError, exit_process=print)
        watchdog._loop._woken = _Broken()
        with watchdog:
            assert wait_until(lambda: not watchdog._loop.running, WAIT_S)
    [death] = _tracebacks(caplog, logging.CRITICAL, "rootcause-launch-watch")
    assert death.exc_info[0] is RuntimeError  # type: ignore[index]
    note = watchdog.note()
    assert note is not None and "agent watchdog stopped at " in note and "the loop itself broke" in note


# --- the death watcher ---------------------------------------------------------------------------


@pytest.mark.parametrize("use_pidfd", [True, False], ids=["pidfd", "polling"])
def test_an_exit_whose_record_raises_costs_that_record_and_the_next_exit_is_recorded(
        use_pidfd: bool, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Recording the first child's exit raises: the watcher thread (which used to stop there, every
    later exit then stamped with torch's detection time) records the next child's exit, status included."""
    if use_pidfd and not hasattr(os, "pidfd_open"):
        pytest.skip("no pidfd_open here")
    broken, calls = _raises_first(death_watcher_module._read_status)
    monkeypatch.setattr(death_watcher_module, "_read_status", broken)
    first = subprocess.Popen(["/bin/sh", "-c", "exit 3"])
    second = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read(); sys.exit(5)"],
                              stdin=subprocess.PIPE)
    try:
        with caplog.at_level(logging.DEBUG, logger=GUARD_LOGGER), DeathWatcher(use_pidfd=use_pidfd) as watcher:
            watcher.watch(first.pid)
            assert wait_until(lambda: calls, WAIT_S), "the first exit was never looked at"
            watcher.watch(second.pid)
            assert second.stdin is not None
            second.stdin.close()  # the second child exits now
            assert wait_until(lambda: watcher.exit_of(second.pid) is not None, WAIT_S), "the next exit was lost"
            exit_ = watcher.exit_of(second.pid)
            assert exit_ is not None and exit_.exitcode == 5
            assert watcher._loop is not None and watcher._loop.running
            note = watcher.note()
    finally:
        first.wait()
        second.wait()
    assert note is not None and "death watcher failed at " in note and "UnicodeError" in note
    [traceback] = _tracebacks(caplog, logging.ERROR, "death watcher")
    assert traceback.exc_info[0] is UnicodeError  # type: ignore[index]


def test_a_death_watcher_thread_that_dies_anyway_is_logged_critical_and_the_kernel_still_answers(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    child = subprocess.Popen(["/bin/sh", "-c", "exit 7"])
    try:
        with caplog.at_level(logging.DEBUG, logger=GUARD_LOGGER), DeathWatcher() as watcher:

            def broken() -> list[Any]:  # no ``Exception``: a step that raises one only costs that step
                raise _Stop("the loop itself broke")

            monkeypatch.setattr(watcher, "_take_pending", broken)
            watcher.watch(child.pid)  # wakes the thread, which dies taking its pending processes
            assert wait_until(lambda: watcher._loop is not None and not watcher._loop.running, WAIT_S)
            # the watchdog's own look at the kernel still sees the exit, status included
            assert wait_until(lambda: watcher.confirm_exit(child.pid) is not None, WAIT_S)
            exit_ = watcher.exit_of(child.pid)
            assert exit_ is not None and exit_.exitcode == 7
            note = watcher.note()
    finally:
        child.wait()
    [death] = _tracebacks(caplog, logging.CRITICAL, "rootcause-death-watcher")
    assert death.exc_info[0] is _Stop  # type: ignore[index]
    assert note is not None and "death watcher stopped at " in note


# --- the hang watch ------------------------------------------------------------------------------


def test_a_hang_watch_look_that_raises_costs_that_look_and_the_hung_rank_is_still_named(
        tmp_path: Any, processes: list[subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """Its first two looks raise (the same kind twice: logged once, not once per look, as it was):
    the watch's thread goes on and names the rank that sleeps while a peer pod waits for it."""
    broken, calls = _raises_first(hang_watch_module.process_tree_usage, times=2)
    monkeypatch.setattr(hang_watch_module, "process_tree_usage", broken)
    store = dist.HashStore()
    since = time.time_ns() - 30 * S
    store.set("rootcause/hang/wait/1", waits_text([PeerWait(2, "pod-1", CollectivePosition("0", 5, "gloo:all_reduce",
                                                                                            since))]))
    asleep = _start(processes, _SLEEP)
    worker = _worker(tmp_path, asleep, 0, GroupProgress("0", 4, 4))
    told: list[dict[int, Any]] = []
    watch = HangWatch(_Ledger([worker]), _Peers(store), HangSettings(after_s=1.5, interval_s=0.2),  # type: ignore[arg-type]
                      on_hung=told.append, worker_name="pod-0")
    with caplog.at_level(logging.DEBUG, logger=GUARD_LOGGER), watch:
        assert wait_until(lambda: watch.found(), WAIT_S), "the hung rank was never named"
    assert len(calls) > 2 and list(watch.found()) == [asleep.pid] and [list(call) for call in told] == [[asleep.pid]]
    [traceback] = _tracebacks(caplog, logging.ERROR, "hang watch")
    assert traceback.exc_info[0] is UnicodeError  # type: ignore[index]
    note = watch.note()
    assert note is not None and "hang watch failed at " in note and "(2 iterations failed in all)" in note


def test_a_hang_watch_thread_that_dies_anyway_is_logged_critical_and_noted(caplog: pytest.LogCaptureFixture) -> None:
    watch = HangWatch(_Ledger([]), None, HangSettings(after_s=1.5, interval_s=0.05))  # type: ignore[arg-type]
    watch._loop._woken = _Broken()
    with caplog.at_level(logging.DEBUG, logger=GUARD_LOGGER), watch:
        assert wait_until(lambda: not watch._loop.running, WAIT_S)
    [death] = _tracebacks(caplog, logging.CRITICAL, "rootcause-launch-watch")
    assert death.exc_info[0] is RuntimeError  # type: ignore[index]
    note = watch.note()
    assert note is not None and "hang watch stopped at " in note


# --- the store client ----------------------------------------------------------------------------


@pytest.mark.parametrize(("error", "said"), [(UnicodeError, r"client failed \(UnicodeError"),
                                              (_Stop, r"thread died \(_Stop")], ids=["step", "death"])
def test_a_store_client_step_that_raises_or_a_thread_that_dies_fails_its_caller_at_once_and_the_next_call_is_answered(
        error: type[BaseException], said: str, server_port: int, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """The helper thread's step raises (an ``Exception``), or its thread dies (anything else), while a
    ``set`` waits on it: the caller gets the store error it handles (``StoreUnresponsive``) long
    before its deadline, not after it; the next call is answered, by the same thread or a new one (a
    dead client used to fail every later call, and the peer watch would then have taken the store's
    host for lost)."""
    timeout_s = 30.0
    store = BoundedStore(client(server_port), timeout_s)
    try:
        real = store._answer
        calls: list[int] = []

        def broken(request: Any) -> None:
            calls.append(1)
            if len(calls) == 1:
                raise error("label too long (a bug no check foresaw)")
            real(request)

        monkeypatch.setattr(store, "_answer", broken)
        with caplog.at_level(logging.DEBUG, logger=GUARD_LOGGER):
            started = time.monotonic()
            with pytest.raises(StoreUnresponsive, match=said):
                store.call("set", "rootcause/test/key", "first")
            assert time.monotonic() - started < timeout_s / 2
            store.call("set", "rootcause/test/key", "second")
            assert store.call("get", "rootcause/test/key") == b"second"
        assert len(calls) == 3
        note = store.note()
        assert note is not None
        if error is _Stop:
            [death] = _tracebacks(caplog, logging.CRITICAL, "rootcause-store-client")
            assert death.exc_info[0] is _Stop  # type: ignore[index]
            assert "rendezvous store client stopped at " in note
        else:
            [traceback] = _tracebacks(caplog, logging.ERROR, "rendezvous store client")
            assert traceback.exc_info[0] is UnicodeError  # type: ignore[index]
            assert "rendezvous store client failed at " in note and "UnicodeError" in note
    finally:
        store.close()


# --- the soft-restart world watcher (a worker's thread) ------------------------------------------


class _Channel:
    """A worker's channel as the real look reads it: no world joined yet (nothing to interrupt)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.version = None


def test_a_world_watcher_look_that_raises_is_logged_once_and_a_dead_watcher_is_started_again(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Its looks raise twice (they used to be swallowed without a word): one traceback, the looks go
    on. Its thread (the worker's watch) then dies: logged at critical level, noted, and the next
    world's group starts a new one."""
    looks: list[int] = []
    end = threading.Event()
    real = soft_restart._interrupt_if_scaled_down

    def look(channel: Any) -> None:
        looks.append(1)
        if len(looks) <= 2:
            raise UnicodeError("label too long (a bug no check foresaw)")
        if end.is_set():
            raise _Stop("the test ends this watcher")
        real(channel)

    monkeypatch.setattr(soft_restart, "_interrupt_if_scaled_down", look)
    monkeypatch.setattr(soft_restart, "_world_duty", [])
    monkeypatch.setattr(thread_guard, "_worker_watch", None)  # this test's own worker watch
    monkeypatch.setattr(soft_restart, "_world_looks", LoopGuard("world watcher", stopped="test"))
    channel = _Channel()
    with caplog.at_level(logging.DEBUG, logger=GUARD_LOGGER):
        soft_restart._ensure_world_watcher(channel)  # type: ignore[arg-type]
        watch = thread_guard.worker_watch()
        first = watch._thread
        assert first is not None
        assert wait_until(lambda: len(looks) >= 5, WAIT_S) and first.is_alive()
        [traceback] = _tracebacks(caplog, logging.ERROR, "world watcher")
        assert traceback.exc_info[0] is UnicodeError  # type: ignore[index]

        end.set()
        first.join(WAIT_S)
        assert not first.is_alive()
        [death] = _tracebacks(caplog, logging.CRITICAL, "rootcause-worker-watch")
        assert death.exc_info[0] is _Stop  # type: ignore[index]
        note = soft_restart._world_looks.note()
        assert note is not None and "world watcher failed at " in note and "world watcher stopped at " in note

        end.clear()
        soft_restart._ensure_world_watcher(channel)  # type: ignore[arg-type]
        second = watch._thread
        seen = len(looks)
        assert second is not first and second is not None
        assert wait_until(lambda: len(looks) > seen, WAIT_S) and second.is_alive()
        watch.stop(WAIT_S)  # no thread left behind
        assert not second.is_alive()
