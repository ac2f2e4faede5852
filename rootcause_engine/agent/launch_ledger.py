"""Agent side: the workers of one launch, and the moments that decide who is a victim.

Why: the diagnosis judges each failed worker against the moment its attempt's teardown began. The
agent watchdog and the hang watch judge the agent's phases by how long it has been in them. Several
parties see those moments first: torch's ``close``, the join wrapper, the watchdog's own teardown.
So each moment is written here once, by whoever sees it first, and read by all of them. The first
stamp wins. How, with the clocks and the lock: ``docs/teardown_watchdog.md``.
"""

from __future__ import annotations

import dataclasses
import threading
import time

from rootcause_engine.agent.death_watcher import DeathWatcher


@dataclasses.dataclass(frozen=True)
class LaunchedWorker:
    """One worker process of one attempt, as torch's agent configured it.

    ``started``: its start time (``death_watcher.start_ticks``), filled in by :meth:`LaunchLedger.add_worker`:
    with the attempt and the pid it names this process, not a later one that reused the pid.
    """

    attempt: int
    local_rank: int
    global_rank: int | None
    group_rank: int | None
    pid: int
    error_file: str
    started: int | None = None

    @property
    def process(self) -> tuple[int, int | None, int]:
        """(pid, start time, attempt): this process for the death watcher, never a later one with its pid."""
        return self.pid, self.started, self.attempt


@dataclasses.dataclass(frozen=True)
class Teardown:
    """The three moments of one attempt's teardown, wall clock (``None``: not reached yet).

    ``began_ns``: tearing down its workers began (:meth:`LaunchLedger.note_teardown`); ``signals_ns``:
    the first termination signal went out (:meth:`LaunchLedger.note_signals`), the moment the roles are
    judged by; ``done_ns``: its surviving workers are gone (:meth:`LaunchLedger.note_teardown_done`).
    """

    began_ns: int | None = None
    signals_ns: int | None = None
    done_ns: int | None = None


class LaunchLedger:
    """The workers of each attempt and the times of the launch's teardowns and phases (thread-safe)."""

    def __init__(self, watcher: DeathWatcher) -> None:
        self.watcher = watcher
        self._lock = threading.Lock()
        self._workers: list[LaunchedWorker] = []
        self._teardowns: dict[int, Teardown] = {}
        self._rendezvous_since_ns: int | None = None
        self._exit_barrier_since_ns: int | None = None
        self._exit_barrier_left_ns: int | None = None

    # --- workers -------------------------------------------------------------------------------

    def add_worker(self, worker: LaunchedWorker) -> None:
        """Watch one worker process of an attempt (the watcher learns its pid and start time)."""
        worker = dataclasses.replace(worker, started=self.watcher.watch(*worker.process))
        with self._lock:
            self._workers.append(worker)

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

    # --- an attempt's teardown ------------------------------------------------------------------

    def note_teardown(self, attempt: int) -> int:
        """Record that tearing down ``attempt``'s workers begins now (the first call wins)."""
        return self._stamp_after_known_exits(attempt, "began_ns")

    def note_signals(self, attempt: int) -> int:
        """Record that the first termination signal to ``attempt``'s workers goes out now (the first call wins).

        Later than :meth:`note_teardown` by the probe (``WorkerTeardown.probe_live_workers``) and the
        agent's own scheduling: a worker that records a failure of its own in between failed before
        anything reached it, so it is no victim of the teardown. This, not the teardown's start, is
        the moment the roles are judged by (``diagnosis.selection``).
        """
        return self._stamp_after_known_exits(attempt, "signals_ns")

    def note_teardown_done(self, attempt: int) -> None:
        """Record that ``attempt``'s surviving workers are gone (the first call wins)."""
        self._stamp(attempt, "done_ns")

    def teardown_of(self, attempt: int) -> Teardown:
        """The moments of ``attempt``'s teardown so far (all ``None`` before it began)."""
        with self._lock:
            return self._teardowns.get(attempt, Teardown())

    def _stamp_after_known_exits(self, attempt: int, moment: str) -> int:
        """Record every exit the kernel reports for ``attempt``, then stamp ``moment`` now (first wins)."""
        for worker in self.workers_of(attempt):
            self.watcher.confirm_exit(*worker.process)
        return self._stamp(attempt, moment)

    def _stamp(self, attempt: int, moment: str) -> int:
        """Stamp ``moment`` (a :class:`Teardown` field) of ``attempt`` now, unless stamped: the stamp it holds."""
        with self._lock:
            teardown = self._teardowns.get(attempt, Teardown())
            stamped: int | None = getattr(teardown, moment)
            if stamped is None:
                stamped = time.time_ns()
                self._teardowns[attempt] = dataclasses.replace(teardown, **{moment: stamped})
            return stamped

    # --- the agent's phases ---------------------------------------------------------------------

    @property
    def rendezvous_since_ns(self) -> int | None:
        """When the agent entered the rendezvous it is in now (monotonic); ``None`` outside a rendezvous."""
        with self._lock:
            return self._rendezvous_since_ns

    def on_rendezvous(self, entered: bool) -> None:
        with self._lock:
            self._rendezvous_since_ns = time.monotonic_ns() if entered else None

    @property
    def exit_barrier_since_ns(self) -> int | None:
        """When the agent entered torch's exit barrier (waiting for other pods; monotonic); ``None`` outside it."""
        with self._lock:
            return self._exit_barrier_since_ns

    @property
    def exit_barrier_left_ns(self) -> int | None:
        """When the agent last left torch's exit barrier (monotonic); ``None`` if it never did."""
        with self._lock:
            return self._exit_barrier_left_ns

    def on_exit_barrier(self, entered: bool) -> None:
        with self._lock:
            now = time.monotonic_ns()
            if entered:
                self._exit_barrier_since_ns = now
            else:
                self._exit_barrier_since_ns, self._exit_barrier_left_ns = None, now
