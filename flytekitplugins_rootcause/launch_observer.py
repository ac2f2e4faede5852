"""Agent side: see every worker torch elastic starts, and when the agent begins tearing them down.

torch's ``LocalElasticAgent`` starts each attempt's workers with ``start_processes`` and ends them
with ``PContext.close`` (SIGTERM, then SIGKILL after a timeout). While a launch runs, this module
wraps that one function in the agent module, so that for each new process context it:

- registers every worker pid with the :class:`DeathWatcher` (exact exit times), together with its
  ranks, restart attempt and error-file path (from the context torch built);
- wraps that context's ``close`` to note when teardown began (a worker still alive then and killed
  afterwards is a *victim*) and to apply the configured grace period instead of torch's hard-coded
  30 s between SIGTERM and SIGKILL.

Both launch paths (function workers via ``MultiprocessContext``, binaries via ``SubprocessContext``)
go through ``start_processes``, so both are covered. Nothing else in torch is changed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from torch.distributed.elastic.agent.server import local_elastic_agent

from flytekitplugins_rootcause.death_watcher import DeathWatcher, ProcessExit


@dataclasses.dataclass(frozen=True)
class LaunchedWorker:
    """One worker process of one attempt, as torch's agent configured it."""

    attempt: int
    local_rank: int
    global_rank: int | None
    group_rank: int | None
    pid: int
    error_file: str


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


class LaunchObserver:
    """Collects the workers, exits and teardown times of one ``elastic_launch``."""

    def __init__(self, watcher: DeathWatcher, *, teardown_grace_s: float | None = None) -> None:
        self.watcher = watcher
        self.teardown_grace_s = teardown_grace_s
        self._lock = threading.Lock()
        self._workers: list[LaunchedWorker] = []
        self._teardown_ns: dict[int, int] = {}
        self._contexts: dict[int, Any] = {}

    @property
    def workers(self) -> list[LaunchedWorker]:
        with self._lock:
            return list(self._workers)

    def last_attempt(self) -> int | None:
        with self._lock:
            return max((w.attempt for w in self._workers), default=None)

    def workers_of(self, attempt: int) -> list[LaunchedWorker]:
        with self._lock:
            return [w for w in self._workers if w.attempt == attempt]

    def teardown_ns(self, attempt: int) -> int | None:
        with self._lock:
            return self._teardown_ns.get(attempt)

    def exit_of(self, worker: LaunchedWorker) -> ProcessExit | None:
        return self.watcher.exit_of(worker.pid)

    def torch_exitcode(self, worker: LaunchedWorker) -> int | None:
        """The exit code torch's own process handle holds (negative N: killed by signal N).

        The watcher reads the status without reaping, but torch's teardown may reap first; the
        handle torch reaped with still knows the code.
        """
        with self._lock:
            pcontext = self._contexts.get(worker.attempt)
        processes = getattr(getattr(pcontext, "_pc", None), "processes", None)
        if processes is not None and worker.local_rank < len(processes):
            return processes[worker.local_rank].exitcode
        handlers = getattr(pcontext, "subprocess_handlers", None) or {}
        handler = handlers.get(worker.local_rank) if isinstance(handlers, dict) else None
        proc = getattr(handler, "proc", None)
        return getattr(proc, "returncode", None)

    def on_started(self, pcontext: Any) -> None:
        """Register a freshly started process context (called right after ``start_processes``)."""
        envs: dict[int, dict[str, str]] = getattr(pcontext, "envs", {}) or {}
        error_files: dict[int, str] = getattr(pcontext, "error_files", {}) or {}
        pids: dict[int, int] = pcontext.pids()
        first_env = next(iter(envs.values()), {})
        attempt = _int_or_none(first_env.get("TORCHELASTIC_RESTART_COUNT")) or 0
        started = []
        for local_rank, pid in sorted(pids.items()):
            env = envs.get(local_rank, {})
            started.append(
                LaunchedWorker(
                    attempt=attempt,
                    local_rank=local_rank,
                    global_rank=_int_or_none(env.get("RANK")),
                    group_rank=_int_or_none(env.get("GROUP_RANK")),
                    pid=pid,
                    error_file=error_files.get(local_rank, ""),
                )
            )
            self.watcher.watch(pid)
        with self._lock:
            self._workers.extend(started)
            self._contexts[attempt] = pcontext
        self._wrap_close(pcontext, attempt)

    def _wrap_close(self, pcontext: Any, attempt: int) -> None:
        original_close: Callable[..., None] = pcontext.close
        grace = self.teardown_grace_s

        def close(death_sig: Any = None, timeout: float = 30) -> None:
            with self._lock:
                self._teardown_ns.setdefault(attempt, time.time_ns())
            if grace is not None:
                timeout = min(timeout, grace)
            original_close(death_sig, timeout)

        pcontext.close = close


@contextlib.contextmanager
def observing_launch(observer: LaunchObserver) -> Iterator[LaunchObserver]:
    """Route the agent's ``start_processes`` through ``observer`` for the duration of a launch.

    The agent module looks ``start_processes`` up as a module global on every attempt, so
    replacing it there (and restoring it after) is the narrowest hook torch offers. An elastic
    launch runs once per agent process, so no other launch can see the replacement.
    """
    original = local_elastic_agent.start_processes

    def start_and_observe(*args: Any, **kwargs: Any) -> Any:
        pcontext = original(*args, **kwargs)
        observer.on_started(pcontext)
        return pcontext

    local_elastic_agent.start_processes = start_and_observe
    try:
        yield observer
    finally:
        local_elastic_agent.start_processes = original
