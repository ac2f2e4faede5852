"""Agent side: see every worker torch elastic starts, and when the agent begins tearing them down.

Why: torch's agent keeps its workers and its teardown to itself. The report needs exact exits,
teardown times, and a teardown under the configured grace. So while a launch runs, this module wraps
torch's ``start_processes`` and each process context's ``close`` (and, on the function path,
``join``). What the wraps see is kept by three parts: the :class:`~.launch_ledger.LaunchLedger`, the
:class:`~.worker_ends.WorkerEnds` and the :class:`~.worker_teardown.WorkerTeardown`. How it reaches
into torch is :mod:`rootcause_engine.upstream.torch_elastic`. How the wraps work:
``docs/teardown_watchdog.md``.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing.connection
import os
import pickle
import time
from collections.abc import Callable, Iterator
from typing import Any

from rootcause_engine.agent.death_watcher import DeathWatcher
from rootcause_engine.agent.launch_ledger import LaunchedWorker, LaunchLedger
from rootcause_engine.agent.peer_watch import PeerWatch
from rootcause_engine.agent.worker_ends import WorkerEnds
from rootcause_engine.agent.worker_teardown import WorkerTeardown
from rootcause_engine.upstream import torch_elastic


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


class LaunchObserver:
    """One ``elastic_launch`` seen through torch's own calls, and the parts that keep what it saw.

    ``ledger``: the workers and the moments of teardowns and phases; ``ends``: torch's process
    contexts, read for how each worker ended; ``teardown``: the one policy that ends workers. This
    class only installs the wraps that feed them (:meth:`on_started`).
    """

    def __init__(
        self, watcher: DeathWatcher, *, teardown_grace_s: float | None = None, probe_before_teardown: bool = False
    ) -> None:
        self.watcher = watcher
        self.ledger = LaunchLedger(watcher)
        self.ends = WorkerEnds(watcher)
        self.teardown = WorkerTeardown(
            self.ledger, teardown_grace_s=teardown_grace_s, probe_before_teardown=probe_before_teardown
        )

    def on_started(self, pcontext: Any) -> None:
        """Register a freshly started process context (called right after ``start_processes``)."""
        envs = torch_elastic.worker_envs(pcontext)
        error_files = torch_elastic.worker_error_files(pcontext)
        pids = torch_elastic.worker_pids(pcontext)
        first_env = next(iter(envs.values()), {})
        attempt = _int_or_none(first_env.get("TORCHELASTIC_RESTART_COUNT")) or 0
        for local_rank, pid in sorted(pids.items()):
            env = envs.get(local_rank, {})
            self.ledger.add_worker(
                LaunchedWorker(
                    attempt=attempt,
                    local_rank=local_rank,
                    global_rank=_int_or_none(env.get("RANK")),
                    group_rank=_int_or_none(env.get("GROUP_RANK")),
                    pid=pid,
                    error_file=error_files.get(local_rank, ""),
                )
            )
        self.ends.add_context(attempt, pcontext)
        self._wrap_close(pcontext, attempt)
        self._wrap_join(pcontext, attempt)

    def _wrap_close(self, pcontext: Any, attempt: int) -> None:
        grace = self.teardown.teardown_grace_s
        ledger = self.ledger

        def wrap(original_close: Callable[..., None]) -> Callable[..., None]:
            def close(death_sig: Any = None, timeout: float = 30) -> None:
                ledger.note_teardown(attempt)
                self.teardown.probe_live_workers(attempt)
                if grace is not None:
                    timeout = min(timeout, grace)
                ledger.note_signals(attempt)
                original_close(death_sig, timeout)
                ledger.note_teardown_done(attempt)

            return close

        torch_elastic.wrap_close(pcontext, wrap)

    def _wrap_join(self, pcontext: Any, attempt: int) -> None:
        """Take over the teardown ``ProcessContext.join`` does when it sees a failed worker.

        torch's ``MultiprocessContext._poll`` calls ``self._pc.join(-1)``; on a failure that join
        sends SIGTERM to the others and waits 30 s before SIGKILL (``grace_period=None``). This
        wrapper does the same wait on the sentinels first; if a worker failed, it ends every live
        worker with the configured grace (``WorkerTeardown.end_workers``, which notes teardown first) and puts
        the failed worker's sentinel first, so that torch's join (which now finds every worker gone)
        reports that worker. A worker whose error file exists has failed even before its process
        exits (it is unwinding).

        A worker that exits with code 0 before torch collected every return value failed too (it
        never returned: ``os._exit(0)``, or SIGINT, which torch's ``spawn._wrap`` turns into exit 0).
        torch's join counts it as a success and pops its sentinel, and its monitor loop then reads
        HEALTHY for as long as any other worker lives, or forever once none does (it waits for a
        return value that never comes). The wrapper raises torch's own ``ProcessExitedException`` for it instead.

        torch's join then collects only the exits this wait saw and judged: the others' sentinels
        are hidden from it for the call and put back after. Otherwise a worker that ends between
        this wait and torch's own (a few microseconds, longer on a busy machine) would be popped
        by torch as a success, unseen by the wrapper, and the launch would stall.
        """
        grace = self.teardown.teardown_grace_s
        process_context = torch_elastic.joinable_process_context(pcontext)
        if process_context is None:
            return
        processes = torch_elastic.processes  # the context's ``multiprocessing`` processes, by local rank

        def wrap(original_join: Callable[..., bool]) -> Callable[..., bool]:
            def join(timeout: float | None = None, grace_period: float | None = None) -> bool:
                sentinels = torch_elastic.live_sentinels(process_context)
                unseen: dict[Any, int] = {}  # workers this wait did not see exit: hidden from torch's join
                if sentinels:
                    ready = multiprocessing.connection.wait(list(sentinels), timeout=timeout)
                    seen_ns = time.time_ns()
                    for sentinel in ready:
                        # Record each exit at its sentinel's time, before it is reaped and before teardown
                        # is noted: stamped any later (a watcher thread starved of CPU, or a process not
                        # yet waitable), it would look as if it died after teardown began (a victim).
                        self.watcher.note_ended(processes(process_context)[sentinels[sentinel]].pid, seen_ns)
                    early_exit_fails = self.ends.results_delivered(attempt) is False
                    exited = [sentinels[s] for s in ready]
                    failed = _failed_indices(process_context, exited, early_exit_fails)
                    failed += _recorded_alive_indices(pcontext, process_context, exclude=exited)
                    if failed:
                        first = min(failed, key=lambda index: self._failure_ns(pcontext, process_context, index))
                        self.teardown.end_workers(attempt)
                        if processes(process_context)[first].exitcode == 0:
                            raise _exited_without_result(process_context, first)
                        torch_elastic.set_live_sentinels(
                            process_context,
                            {s: i for s, i in sorted(sentinels.items(), key=lambda item: item[1] != first)},
                        )
                    else:
                        unseen = {s: i for s, i in sentinels.items() if s not in ready}
                    timeout = 0  # the wait is done; torch's join only collects what is ready
                try:
                    torch_elastic.set_live_sentinels(
                        process_context, _without(torch_elastic.live_sentinels(process_context), unseen)
                    )
                    return original_join(timeout, grace if grace_period is None else grace_period) and not unseen
                except (EOFError, pickle.UnpicklingError) as exc:
                    raise _unreadable_error_file(process_context, exc) from exc
                finally:
                    torch_elastic.set_live_sentinels(
                        process_context, {**torch_elastic.live_sentinels(process_context), **unseen}
                    )

            return join

        torch_elastic.wrap_join(process_context, wrap)

    def _failure_ns(self, pcontext: Any, process_context: Any, index: int) -> int:
        """When worker ``index`` failed: its exit (the watcher's time), else when its error file appeared."""
        exit_ = self.watcher.exit_of(torch_elastic.processes(process_context)[index].pid)
        if exit_ is not None:
            return exit_.exit_ns
        with contextlib.suppress(OSError, KeyError, TypeError):
            return os.stat(torch_elastic.worker_error_files(pcontext)[index]).st_mtime_ns
        return time.time_ns()


def _without(sentinels: dict[Any, int], hidden: dict[Any, int]) -> dict[Any, int]:
    return {sentinel: index for sentinel, index in sentinels.items() if sentinel not in hidden}


def _failed_indices(process_context: Any, indices: list[int], early_exit_fails: bool) -> list[int]:
    """The ready workers among ``indices`` that failed (reaping them).

    Failed: a non-zero status, or any exit at all while ``early_exit_fails`` (the attempt's return
    values were not all collected, so even exit code 0 means the worker never returned).
    """
    failed = []
    for index in indices:
        process = torch_elastic.processes(process_context)[index]
        process.join()  # its sentinel is ready: it has exited, this only reaps it (as torch does)
        if process.exitcode != 0 or early_exit_fails:
            failed.append(index)
    return failed


def _recorded_alive_indices(pcontext: Any, process_context: Any, exclude: list[int]) -> list[int]:
    """Workers still running whose error file exists: they recorded an uncaught exception and are exiting.

    The recorder writes the file only complete (``worker_recorder.write_complete``) and only for an
    exception that ends the worker, so the agent need not wait for the interpreter's shutdown (which
    can take seconds with a process group and data loaders) before it tears the others down.
    """
    error_files = torch_elastic.worker_error_files(pcontext)
    live = set(torch_elastic.live_sentinels(process_context).values()) - set(exclude)
    return [index for index in sorted(live) if error_files.get(index) and os.path.exists(error_files[index])]


def _unreadable_error_file(process_context: Any, cause: BaseException) -> Exception:
    """torch's ``ProcessExitedException`` for a failed worker whose torch error file is cut short.

    torch's join unpickles the worker's traceback file and lets the ``EOFError`` of a truncated one
    escape, which its poll does not catch: the launch would end with "Ran out of input" instead of
    a worker failure. The failed worker is the one joined with a non-zero status.
    """
    processes = torch_elastic.processes(process_context)
    failed = [i for i, process in enumerate(processes) if process.exitcode not in (0, None)]
    index = failed[0] if failed else 0
    process = processes[index]
    return torch_elastic.process_exited_exception(
        f"process {index:d} failed; its error file could not be read ({type(cause).__name__}: {cause})",
        index=index,
        pid=process.pid,
        exit_code=process.exitcode or 1,
    )


def _exited_without_result(process_context: Any, index: int) -> Exception:
    """torch's own exception for a worker that exited 0 without returning (its ``_poll`` handles it)."""
    sentinels = torch_elastic.live_sentinels(process_context)
    torch_elastic.set_live_sentinels(process_context, {s: i for s, i in sentinels.items() if i != index})
    pid = torch_elastic.processes(process_context)[index].pid
    return torch_elastic.process_exited_exception(
        f"process {index:d} exited with code 0 before returning its result",
        index=index,
        pid=pid,
        exit_code=0,
    )


@contextlib.contextmanager
def _agent_objects_frozen() -> Iterator[None]:
    """Keep workers forked in the block from garbage-collecting objects they inherit from the agent.

    A forked worker inherits every object of the agent, its uncollected garbage included: the
    previous launch's rendezvous, for instance, stays reachable from a reference cycle (the
    exception the task raised, its traceback, the frame that raised it) until the agent's next
    full collection. Freed by the worker's collector instead, torch's ``TCPStore`` destructor joins
    a store thread that does not exist in the worker: SIGSEGV (the 4th and 6th of six ``fork``
    launches run back to back in one process, every time, in ``tests/test_fork_start.py``'s
    script). ``gc.freeze`` moves the agent's objects out of reach of every collection until
    ``gc.unfreeze``, which the agent runs right after the fork; in the workers they stay frozen.
    Both are list splices, not heap walks.
    """
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@contextlib.contextmanager
def observing_launch(observer: LaunchObserver, peers: PeerWatch | None = None) -> Iterator[LaunchObserver]:
    """Route the agent's ``start_processes``, rendezvous and exit barrier through ``observer``.

    For the launch only (:mod:`rootcause_engine.upstream.torch_elastic` says where torch
    looks these up): every process context torch starts is registered with the observer (the
    watcher's thread paused and the agent's objects frozen while the workers are forked), and the
    observer notes when the agent enters and leaves the rendezvous and the exit barrier (the
    watchdog gives each phase its own time limit). ``peers`` learns each round the agent joins, and
    no store call of its heartbeat is in flight at any fork of the workers (:meth:`PeerWatch.paused`:
    each fork waits for the call in flight, and the heartbeat goes on between the forks, so that
    a slow start of many workers does not silence this pod for its peers; its owner stops it: it
    must go on beating while the failure is diagnosed, so that the other pods see this one alive). Entering the exit
    barrier (this pod's workers all returned), the pod tells its peers it is done: torch's barrier
    waits on the store client the heartbeat shares, so no heartbeat goes out while it waits for
    slower pods, and a peer that had not been told would take the silence for a lost pod.
    """

    def exit_barrier(entered: bool) -> None:
        if entered and peers is not None:
            peers.finish()
        observer.ledger.on_exit_barrier(entered)

    def start_and_observe(original: Callable[..., Any]) -> Callable[..., Any]:
        def start(*args: Any, **kwargs: Any) -> Any:
            # no watcher thread and no store call of the heartbeat busy while the workers are
            # forked, and no agent object they may collect
            with (
                observer.watcher.paused(),
                peers.paused() if peers is not None else contextlib.nullcontext(),
                _agent_objects_frozen(),
            ):
                pcontext = original(*args, **kwargs)
            observer.on_started(pcontext)
            return pcontext

        return start

    with (
        torch_elastic.patch_start_processes(start_and_observe),
        torch_elastic.patch_agent_phases(
            on_rendezvous=observer.ledger.on_rendezvous,
            on_exit_barrier=exit_barrier,
            after_rendezvous=None if peers is None else peers.joined,
        ),
    ):
        yield observer
