"""Agent side: record the exact exit time and status of every worker process.

Why: torch's agent learns of a worker's death only at its next poll. It stamps a worker that left
no error file with that *detection* time, up to ``monitor_interval`` late. The watcher holds a pidfd
per worker and wakes the moment one exits. It reads the status without reaping, so torch's own
bookkeeping is untouched. A process is known by its pid, start time and launch attempt, so a reused
pid never inherits another worker's exit. How, with the fallback and the clocks:
``docs/teardown_watchdog.md``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import select
import threading
import time
from collections.abc import Iterator
from types import TracebackType

from rootcause_engine.thread_guard import GuardedLoop, LoopGuard

logger = logging.getLogger(__name__)

_CLD_EXITED = getattr(os, "CLD_EXITED", 1)
#: The pause after a ``poll`` that raised, so that an error that repeats is no spin.
_PAUSE_AFTER_FAILURE_S = 0.05


@dataclasses.dataclass(frozen=True)
class ProcessExit:
    """How and when one process ended. ``exitcode``/``signal_number`` are ``None`` when unknown.

    ``started``: the process's start time (:func:`start_ticks`) and ``attempt``: its launch attempt,
    which tell it from a later process with the same pid; ``exit_mono_ns``: the same moment as
    ``exit_ns`` on the monotonic clock (for deadlines), or later, never earlier.
    """

    pid: int
    exit_ns: int
    exitcode: int | None
    signal_number: int | None
    started: int | None = None
    attempt: int | None = None
    exit_mono_ns: int | None = dataclasses.field(default=None, compare=False)


#: A process: (pid, start time, attempt); the start time is ``None`` where ``/proc`` could not tell
#: it, the attempt where the caller gave none.
ProcessKey = tuple[int, "int | None", "int | None"]


def start_ticks(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks after boot (``/proc/<pid>/stat`` field 22); ``None`` when
    there is no such process (reaped) or no ``/proc``. A zombie still has it."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            text = handle.read()
        # field 2 (the command) may hold spaces and parentheses: count from the last ")", field 3 on
        return int(text.rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _read_status(key: ProcessKey) -> tuple[int | None, int | None]:
    """(exit code, signal) of an exited child without reaping it; (None, None) if already reaped, or
    if its pid now names another process (whose status is not this one's)."""
    pid, started, _ = key
    if start_ticks(pid) != started:
        return None, None
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except (ChildProcessError, OSError):
        return None, None
    if info is None:
        return None, None
    if info.si_code == _CLD_EXITED:
        return info.si_status, None
    return None, info.si_status


def _still_running(pid: int) -> bool | None:
    """True/False for a child of ours; ``None`` when it is not our child (cannot tell)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
    except ChildProcessError:
        return None


def _is_running(key: ProcessKey) -> bool:
    """Whether the process ``key`` names still runs: its pid names a process with its start time,
    and that process has not exited (a pid reused by another process says nothing of this one)."""
    pid, started, _ = key
    return start_ticks(pid) == started and _still_running(pid) is True


class DeathWatcher:
    """Watches child processes from a background thread; use as a context manager."""

    def __init__(self, *, use_pidfd: bool | None = None, fallback_poll_s: float = 0.01) -> None:
        self._use_pidfd = hasattr(os, "pidfd_open") if use_pidfd is None else use_pidfd
        self._fallback_poll_s = fallback_poll_s
        self._lock = threading.Lock()
        self._exits: dict[ProcessKey, ProcessExit] = {}
        self._pending: list[ProcessKey] = []
        self._watched: set[ProcessKey] = set()
        self._keys_of: dict[int, list[ProcessKey]] = {}  # pid -> the processes known with it, oldest first
        self._closed = False
        self._loop: GuardedLoop | None = None  # the watcher thread (a new one after each pause)
        self._wake_read, self._wake_write = os.pipe()
        #: one process's watch or one exit's record that raised costs that one only; a thread that
        #: died anyway is logged and kept for the report (:meth:`note`)
        self.guard = LoopGuard(
            "death watcher",
            stopped="the exits after it carry the time torch's agent or the watchdog saw them, not the moment they "
                    "happened",
        )

    @property
    def uses_pidfd(self) -> bool:
        return self._use_pidfd

    def __enter__(self) -> DeathWatcher:
        self._start_thread()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No watcher thread for the block: the agent forks its workers in there.

        A worker forked (``start_method="fork"``) while this thread sat in ``poll`` crashed in its
        garbage collector (SIGSEGV in every second fork on this machine's CPython 3.11); with no
        such thread at the fork, none did. Pids already watched are handed to the next thread, and
        an exit during the pause is still recorded (its pidfd stays readable), only later.
        """
        running = self._loop is not None and self._loop.running
        if running:
            self._stop_thread()
        try:
            yield
        finally:
            if running and not self._closed:
                self._start_thread()

    def _start_thread(self) -> None:
        """A new watcher thread, with descriptors of its own (:class:`_PidfdWatch` or :class:`_PollingWatch`)."""
        watch = _PidfdWatch(self) if self._use_pidfd else _PollingWatch(self)
        self._loop = GuardedLoop("rootcause-death-watcher", watch.step, interval_s=watch.pause_s, first_wait=False,
                                 guard=self.guard, at_end=watch.end).start()

    def _stop_thread(self) -> None:
        if self._loop is None:
            return
        self._loop.stop(timeout_s=0)
        with contextlib.suppress(OSError):
            os.write(self._wake_write, b"x")
        self._loop.stop(timeout_s=5)

    def watch(self, pid: int, started: int | None = None, attempt: int | None = None) -> int | None:
        """Start watching ``pid`` (a child of this process) of launch ``attempt``; returns its start time
        (``started`` when given). A later process with the same pid is watched afresh: it is another one."""
        key = (pid, started if started is not None else start_ticks(pid), attempt)
        with self._lock:
            if key in self._watched:
                return key[1]
            self._watched.add(key)
            self._keys_of.setdefault(pid, []).append(key)
            self._pending.append(key)
        os.write(self._wake_write, b"x")
        return key[1]

    def exits(self) -> dict[ProcessKey, ProcessExit]:
        """Exits seen so far, by (pid, start time, attempt)."""
        with self._lock:
            return dict(self._exits)

    def exit_of(self, pid: int, started: int | None = None, attempt: int | None = None) -> ProcessExit | None:
        """The exit of the last process known with ``pid`` that has the ``started`` and ``attempt`` given
        (never an earlier process's, whose pid it reused)."""
        with self._lock:
            return self._exits.get(self._key(pid, started, attempt))

    def confirm_exit(self, pid: int, started: int | None = None, attempt: int | None = None) -> ProcessExit | None:
        """Ask the kernel now, from the caller's thread, whether the process has exited; record it if so.

        The watcher thread is the precise source, but the agent watchdog must not depend on it
        alone (a thread starved of CPU, or one that stopped on an error, would blind it). A child
        that exited is recorded now with its status; one that is no longer our child at all was
        already reaped by torch, and is recorded as exited with an unknown status, as is one whose
        pid now names another process. Which process: as for :meth:`exit_of`.
        """
        with self._lock:
            key = self._key(pid, started, attempt)
            known = self._exits.get(key)
        if known is None and not _is_running(key):
            self._record(key, time.time_ns(), time.monotonic_ns())
        with self._lock:
            return self._exits.get(key)

    def note_ended(self, pid: int, seen_ns: int, *, status_wait_s: float = 0.5) -> ProcessExit:
        """Record that ``pid`` had ended by ``seen_ns``: its ``multiprocessing`` sentinel was ready then.

        A sentinel is a pipe the kernel closes while the process exits, *before* the process
        becomes waitable: on this machine ``waitid`` still called it running right after its
        sentinel was ready in 2 of 300 forked and 3 of 60 spawned exits, even unloaded. The time is
        therefore the sentinel's, not the moment ``waitid`` first sees the zombie (under load that
        came after the agent had begun teardown, and the worker that failed first was counted
        among the victims). The status is waited for up to ``status_wait_s`` (the process is in
        its last steps of exiting) and left unknown after that; an earlier record keeps its status
        and the earlier time. The monotonic stamp is this call's: converted from ``seen_ns`` it
        would move with a wall-clock step.
        """
        mono_ns = time.monotonic_ns()
        with self._lock:
            key = self._key(pid, None, None)
        deadline = time.monotonic() + status_wait_s
        while _still_running(pid) is True and time.monotonic() < deadline:
            time.sleep(0.001)
        self._record(key, seen_ns, mono_ns)
        with self._lock:
            exit_ = self._exits.get(key)
        assert exit_ is not None
        return exit_

    def _key(self, pid: int, started: int | None, attempt: int | None) -> ProcessKey:
        """The last process known with ``pid`` that matches the fields given; for a pid never watched,
        the process that has it now (lock held)."""
        for key in reversed(self._keys_of.get(pid, ())):
            if started in (None, key[1]) and attempt in (None, key[2]):
                return key
        return (pid, started if started is not None else start_ticks(pid), attempt)

    def close(self) -> None:
        """Stop the thread and release its file descriptors (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._stop_thread()
        for fd in (self._wake_read, self._wake_write):
            with contextlib.suppress(OSError):
                os.close(fd)

    def _record(self, key: ProcessKey, exit_ns: int, exit_mono_ns: int) -> None:
        """Record the exit of process ``key`` at ``exit_ns`` (wall) / ``exit_mono_ns`` (monotonic), or
        move an earlier record's times back to them.

        Several observers may see one exit (the watcher thread, the agent's join, the watchdog);
        each stamps when *it* saw it, so the earliest stamp is the closest to the death. A status
        once known is kept.
        """
        exitcode, signal_number = _read_status(key)
        with self._lock:
            known = self._exits.get(key)
            if known is not None:
                exit_ns = min(exit_ns, known.exit_ns)
                if known.exit_mono_ns is not None:
                    exit_mono_ns = min(exit_mono_ns, known.exit_mono_ns)
                if known.exitcode is not None or known.signal_number is not None:
                    exitcode, signal_number = known.exitcode, known.signal_number
            self._exits[key] = ProcessExit(key[0], exit_ns, exitcode, signal_number, key[1], key[2], exit_mono_ns)
            if key not in self._keys_of.setdefault(key[0], []):
                self._keys_of[key[0]].append(key)

    def _take_pending(self) -> list[ProcessKey]:
        with self._lock:
            pending, self._pending = self._pending, []
        return pending

    def _requeue(self, keys: list[ProcessKey]) -> None:
        """Hand processes a stopping thread still watched to the next one (those not recorded yet)."""
        with self._lock:
            self._pending.extend(key for key in keys if key not in self._exits)

    def note(self) -> str | None:
        """For the report: the watcher's looks failed, or its thread died; ``None`` when neither."""
        return self.guard.note()


class _PidfdWatch:
    """One watcher thread's pidfds: a process whose watch or record raised costs that process's precise
    stamp only (the watchdog's look, or torch's, still sees its exit), never the watch of every later
    exit (each through the watcher's guard)."""

    #: the pause after a ``poll`` that raised, so that an error that repeats is no spin
    pause_s = _PAUSE_AFTER_FAILURE_S

    def __init__(self, watcher: DeathWatcher) -> None:
        self._watcher = watcher
        self._poller = select.poll()
        self._poller.register(watcher._wake_read, select.POLLIN)
        self._fd_to_key: dict[int, ProcessKey] = {}

    def step(self) -> float:
        """Open the processes handed in, then block in ``poll`` until one exits (or the thread is woken):
        each exit is stamped the moment ``poll`` returns. Next step at once."""
        watcher = self._watcher
        for key in watcher._take_pending():
            watcher.guard.run(functools.partial(self._open, key))
        events = self._poller.poll()  # raises: the loop's guard keeps it, the next step after ``pause_s``
        now_ns, now_mono_ns = time.time_ns(), time.monotonic_ns()
        for fd, _ in events:
            watcher.guard.run(functools.partial(self._exited, fd, now_ns, now_mono_ns))
        return 0.0

    def end(self) -> None:
        """The thread ends: its pidfds closed, their processes handed to the next thread."""
        for fd in self._fd_to_key:
            os.close(fd)
        self._watcher._requeue(list(self._fd_to_key.values()))

    def _open(self, key: ProcessKey) -> None:
        """Watch process ``key`` through a pidfd; record it at once if it is gone already."""
        try:
            fd = os.pidfd_open(key[0])
        except ProcessLookupError:
            fd = None
        if fd is not None and start_ticks(key[0]) != key[1]:
            os.close(fd)  # the pid names another process now: this one is gone
            fd = None
        if fd is None:
            self._watcher._record(key, time.time_ns(), time.monotonic_ns())  # gone before we looked
            return
        self._fd_to_key[fd] = key
        self._poller.register(fd, select.POLLIN)

    def _exited(self, fd: int, now_ns: int, now_mono_ns: int) -> None:
        """``fd`` is readable: the wake-up pipe, or the pidfd of a process that exited (recorded)."""
        if fd == self._watcher._wake_read:
            os.read(fd, 4096)
            return
        key = self._fd_to_key.pop(fd)
        self._poller.unregister(fd)
        os.close(fd)
        self._watcher._record(key, now_ns, now_mono_ns)


class _PollingWatch:
    """As :class:`_PidfdWatch` where there is no pidfd: each live process asked every ``fallback_poll_s``."""

    def __init__(self, watcher: DeathWatcher) -> None:
        self._watcher = watcher
        self.pause_s = watcher._fallback_poll_s
        self._live: set[ProcessKey] = set()

    def step(self) -> float:
        watcher = self._watcher
        self._live.update(watcher._take_pending())
        now_ns, now_mono_ns = time.time_ns(), time.monotonic_ns()
        for key in list(self._live):
            watcher.guard.run(functools.partial(self._poll, key, now_ns, now_mono_ns))
        return self.pause_s

    def end(self) -> None:
        self._watcher._requeue(sorted(self._live, key=lambda key: (key[0], key[1] or 0, key[2] or 0)))

    def _poll(self, key: ProcessKey, now_ns: int, now_mono_ns: int) -> None:
        if not _is_running(key):
            self._live.discard(key)
            self._watcher._record(key, now_ns, now_mono_ns)
