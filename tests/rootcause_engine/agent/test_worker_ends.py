"""How each worker ended (``rootcause_engine/agent/worker_ends.py``): the death watcher's reading, torch's process
handles where the watcher has no status, and whether a function worker that exited 0 had returned its result.

Real child processes; torch's function-launch context is stood in for by an object with the attributes
``upstream.torch_elastic`` reads (its processes are real ``multiprocessing`` ones). A real launch through
torch's own contexts is ``test_launch_observer.py``'s."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import threading
from types import SimpleNamespace
from typing import Any

from rootcause_engine.agent.death_watcher import DeathWatcher
from rootcause_engine.agent.launch_ledger import LaunchedWorker
from rootcause_engine.agent.worker_ends import WorkerEnds

FORK = multiprocessing.get_context("fork")


def _function_context(processes: list[Any], collected: dict[int, Any]) -> SimpleNamespace:
    """A function launch's context as torch's ``MultiprocessContext`` holds it: its processes, the return
    values its poll collected, the workers' "finished" event."""
    return SimpleNamespace(_pc=SimpleNamespace(processes=processes), _return_values=collected,
                           _worker_finished_event=threading.Event(), nprocs=len(processes))


def _exits_with(code: int) -> Any:
    process = FORK.Process(target=os._exit, args=(code,))
    process.start()
    process.join()  # torch's join reaps it: the watcher, asked later, knows it ended but not how
    return process


def _worker(attempt: int, local_rank: int, pid: int) -> LaunchedWorker:
    return LaunchedWorker(attempt, local_rank, local_rank, 0, pid, "")


def test_without_torch_s_context_nothing_is_claimed(watcher: DeathWatcher) -> None:
    ends = WorkerEnds(watcher)
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    worker = _worker(0, 0, process.pid)
    try:
        os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT)
        assert watcher.confirm_exit(*worker.process) is not None
        assert (ends.context_of(0), ends.results_delivered(0), ends.torch_exitcode(worker)) == (None, None, None)
        assert ends.exit_of(worker) is not None and ends.exit_of(worker).exitcode == 0  # type: ignore[union-attr]
        assert not ends.exited_without_result(worker)  # no context: a binary worker may exit 0
    finally:
        process.wait()


def test_each_attempt_keeps_its_own_context() -> None:
    with DeathWatcher() as watcher:
        ends = WorkerEnds(watcher)
        first, second = object(), object()
        ends.add_context(0, first)
        ends.add_context(1, second)
        assert (ends.context_of(0), ends.context_of(1), ends.context_of(2)) == (first, second, None)
        ends.add_context(1, first)  # torch restarted attempt 1's context: the latest is kept
        assert ends.context_of(1) is first


def test_results_count_as_delivered_only_once_every_worker_s_value_was_collected(watcher: DeathWatcher) -> None:
    ends = WorkerEnds(watcher)
    collected: dict[int, Any] = {0: "rank 0's value"}
    ends.add_context(0, _function_context([object(), object()], collected))
    assert ends.results_delivered(0) is False
    collected[1] = None  # ``sys.exit(0)`` is a return of None for torch
    assert ends.results_delivered(0) is True


def test_a_context_without_the_finished_event_is_a_binary_launch_with_no_results_to_deliver(
    watcher: DeathWatcher,
) -> None:
    ends = WorkerEnds(watcher)
    ends.add_context(0, SimpleNamespace(_return_values={}, nprocs=2, subprocess_handlers={}))
    assert ends.results_delivered(0) is None


def test_a_function_worker_that_exited_0_before_its_results_were_collected_never_returned(
    watcher: DeathWatcher,
) -> None:
    """The watcher asked after torch's join reaped the processes: it knows they ended, not how; torch's
    handles hold the codes."""
    early, failed = _exits_with(0), _exits_with(3)
    ends = WorkerEnds(watcher)
    ends.add_context(2, _function_context([early, failed], {}))
    zero, three = _worker(2, 0, early.pid), _worker(2, 1, failed.pid)
    for worker in (zero, three):
        seen = watcher.confirm_exit(*worker.process)
        assert seen is not None and (seen.exitcode, seen.signal_number) == (None, None)
    assert (ends.torch_exitcode(zero), ends.torch_exitcode(three)) == (0, 3)
    assert ends.exited_without_result(zero)
    assert not ends.exited_without_result(three)  # it failed, by its code: not an early return


def test_a_worker_still_running_or_killed_by_a_signal_makes_no_claim_about_its_result(watcher: DeathWatcher) -> None:
    running = FORK.Process(target=signal.pause)
    running.start()
    try:
        ends = WorkerEnds(watcher)
        ends.add_context(0, _function_context([running], {}))
        worker = _worker(0, 0, running.pid)
        worker = LaunchedWorker(0, 0, 0, 0, running.pid, "", watcher.watch(*worker.process))
        assert ends.exit_of(worker) is None and not ends.exited_without_result(worker)
        os.kill(running.pid, signal.SIGKILL)
        os.waitid(os.P_PID, running.pid, os.WEXITED | os.WNOWAIT)
        killed = watcher.confirm_exit(*worker.process)
        assert killed is not None and killed.signal_number == signal.SIGKILL
        assert ends.exit_of(worker) == killed
        assert not ends.exited_without_result(worker)
    finally:
        running.kill()
        running.join()
    assert ends.torch_exitcode(worker) == -signal.SIGKILL  # torch's handle: death by signal N is -N


def test_a_local_rank_past_the_function_processes_is_read_from_a_binary_handle(watcher: DeathWatcher) -> None:
    ends = WorkerEnds(watcher)
    proc = SimpleNamespace(returncode=5)
    ends.add_context(0, SimpleNamespace(subprocess_handlers={1: SimpleNamespace(proc=proc)}))
    assert ends.torch_exitcode(_worker(0, 1, 12345)) == 5
    assert ends.torch_exitcode(_worker(0, 0, 12346)) is None  # no handler for it
