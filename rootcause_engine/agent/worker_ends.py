"""Agent side: how each worker of a launch ended, from the kernel and from torch's own bookkeeping.

Why two sources: the death watcher reads each exit from the kernel without reaping (exact times,
exact signals), but torch's teardown may reap a worker first, and then only the process handle torch
reaped with still knows its exit code. And whether a worker that exited 0 had *returned* is only in
torch's state: a function worker hands its return value to the agent and waits for torch's
"finished" event before it exits, so an exit before every value was collected is a worker that
never returned (``os._exit(0)``, or an interrupt torch's wrapper turns into exit code 0).

How torch's objects are read (which attribute holds what) is :mod:`rootcause_engine.upstream.torch_elastic`.
No lock: the agent's thread stores each context and the watchers read it, one dictionary operation each
(atomic in CPython).
"""

from __future__ import annotations

from typing import Any

from rootcause_engine.agent.death_watcher import DeathWatcher, ProcessExit
from rootcause_engine.agent.launch_ledger import LaunchedWorker
from rootcause_engine.upstream import torch_elastic


class WorkerEnds:
    """torch's process context of each attempt, and what it and the watcher say of each worker's end."""

    def __init__(self, watcher: DeathWatcher) -> None:
        self.watcher = watcher
        self._contexts: dict[int, Any] = {}

    def add_context(self, attempt: int, pcontext: Any) -> None:
        """Keep ``attempt``'s process context (the one torch's agent started its workers with)."""
        self._contexts[attempt] = pcontext

    def context_of(self, attempt: int) -> Any:
        return self._contexts.get(attempt)

    def exit_of(self, worker: LaunchedWorker) -> ProcessExit | None:
        """The exit of this very process, not of a later one that reused its pid."""
        return self.watcher.exit_of(*worker.process)

    def results_delivered(self, attempt: int) -> bool | None:
        """Whether torch has collected every worker's return value in ``attempt`` (function launches).

        ``sys.exit(0)`` is no early exit: torch's ``record`` makes it a return of ``None``. ``None``
        for binary launches, whose workers may legitimately exit 0 one by one.
        """
        pcontext = self.context_of(attempt)
        # torch's own bookkeeping, read without a lock (never ``Event.is_set``: see the accessor).
        collected = torch_elastic.collected_return_values(pcontext)
        if collected is None:
            return None
        return len(collected) == torch_elastic.worker_count(pcontext)

    def exited_without_result(self, worker: LaunchedWorker) -> bool:
        """The worker exited with code 0 although its attempt's results were never delivered.

        A worker still running (or killed by a signal) is answered without reading torch's state.
        """
        exit_ = self.exit_of(worker)
        if exit_ is None or exit_.signal_number is not None:
            return False
        if self.results_delivered(worker.attempt) is not False:
            return False
        code = exit_.exitcode if exit_.exitcode is not None else self.torch_exitcode(worker)
        return code == 0

    def torch_exitcode(self, worker: LaunchedWorker) -> int | None:
        """The exit code torch's own process handle holds (negative N: killed by signal N)."""
        pcontext = self.context_of(worker.attempt)
        processes = torch_elastic.function_worker_processes(pcontext)
        if processes is not None and worker.local_rank < len(processes):
            return processes[worker.local_rank].exitcode
        return torch_elastic.binary_worker_returncode(pcontext, worker.local_rank)
