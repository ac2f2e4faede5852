"""Agent side: record the exact exit time and status of every worker process.

torch's agent learns that a worker died only when its monitor loop next polls (every
``monitor_interval`` seconds) and stamps a worker that left no error file (SIGKILL by the OOM
killer, SIGABRT from the NCCL watchdog) with that *detection* time. The watcher holds a pidfd per
worker and blocks in ``poll`` on all of them from one thread, so it wakes the moment a worker
exits. It reads the status with ``waitid(WNOWAIT)``, which leaves the zombie for torch to reap, so
torch's own bookkeeping is untouched.

Where ``os.pidfd_open`` is missing (non-Linux, kernels before 5.3) it falls back to polling
``waitid(WNOHANG | WNOWAIT)`` every ``fallback_poll_s``; times are then that coarse.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import select
import threading
import time
from collections.abc import Iterator
from types import TracebackType

logger = logging.getLogger(__name__)

_CLD_EXITED = getattr(os, "CLD_EXITED", 1)


@dataclasses.dataclass(frozen=True)
class ProcessExit:
    """How and when one process ended. ``exitcode``/``signal_number`` are ``None`` when unknown."""

    pid: int
    exit_ns: int
    exitcode: int | None
    signal_number: int | None


def _read_status(pid: int) -> tuple[int | None, int | None]:
    """(exit code, signal) of an exited child without reaping it; (None, None) if already reaped."""
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


class DeathWatcher:
    """Watches child processes from a background thread; use as a context manager."""

    def __init__(self, *, use_pidfd: bool | None = None, fallback_poll_s: float = 0.01) -> None:
        self._use_pidfd = hasattr(os, "pidfd_open") if use_pidfd is None else use_pidfd
        self._fallback_poll_s = fallback_poll_s
        self._lock = threading.Lock()
        self._exits: dict[int, ProcessExit] = {}
        self._pending: list[int] = []
        self._watched: set[int] = set()
        self._closed = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._wake_read, self._wake_write = os.pipe()

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
        running = self._thread is not None and self._thread.is_alive()
        if running:
            self._stop_thread()
        try:
            yield
        finally:
            if running and not self._closed:
                self._start_thread()

    def _start_thread(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(self._stop,), name="rootcause-death-watcher", daemon=True
        )
        self._thread.start()

    def _stop_thread(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            os.write(self._wake_write, b"x")
        if self._thread is not None and self._thread.is_alive():
            self._thread.join(timeout=5)

    def watch(self, pid: int) -> None:
        """Start watching ``pid`` (a child of this process)."""
        with self._lock:
            if pid in self._watched:
                return
            self._watched.add(pid)
            self._pending.append(pid)
        os.write(self._wake_write, b"x")

    def exits(self) -> dict[int, ProcessExit]:
        """Exits seen so far, by pid."""
        with self._lock:
            return dict(self._exits)

    def exit_of(self, pid: int) -> ProcessExit | None:
        with self._lock:
            return self._exits.get(pid)

    def confirm_exit(self, pid: int) -> ProcessExit | None:
        """Ask the kernel now, from the caller's thread, whether ``pid`` has exited; record it if so.

        The watcher thread is the precise source, but the agent watchdog must not depend on it
        alone (a thread starved of CPU, or one that stopped on an error, would blind it). A child
        that exited is recorded now with its status; one that is no longer our child at all was
        already reaped by torch, and is recorded as exited with an unknown status.
        """
        known = self.exit_of(pid)
        if known is not None:
            return known
        running = _still_running(pid)
        if running is False or running is None:
            self._record(pid, time.time_ns())
        return self.exit_of(pid)

    def note_ended(self, pid: int, seen_ns: int, *, status_wait_s: float = 0.5) -> ProcessExit:
        """Record that ``pid`` had ended by ``seen_ns``: its ``multiprocessing`` sentinel was ready then.

        A sentinel is a pipe the kernel closes while the process exits, *before* the process
        becomes waitable: on this machine ``waitid`` still called it running right after its
        sentinel was ready in 2 of 300 forked and 3 of 60 spawned exits, even unloaded. The time is
        therefore the sentinel's, not the moment ``waitid`` first sees the zombie (under load that
        came after the agent had begun teardown, and the worker that failed first was counted
        among the victims). The status is waited for up to ``status_wait_s`` (the process is in
        its last steps of exiting) and left unknown after that; an earlier record keeps its status
        and the earlier time.
        """
        deadline = time.monotonic() + status_wait_s
        while _still_running(pid) is True and time.monotonic() < deadline:
            time.sleep(0.001)
        self._record(pid, seen_ns)
        exit_ = self.exit_of(pid)
        assert exit_ is not None
        return exit_

    def close(self) -> None:
        """Stop the thread and release its file descriptors (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._stop_thread()
        for fd in (self._wake_read, self._wake_write):
            with contextlib.suppress(OSError):
                os.close(fd)

    def _record(self, pid: int, exit_ns: int) -> None:
        """Record ``pid``'s exit at ``exit_ns``, or move an earlier record's time back to it.

        Several observers may see one exit (the watcher thread, the agent's join, the watchdog);
        each stamps when *it* saw it, so the earliest stamp is the closest to the death. A status
        once known is kept.
        """
        exitcode, signal_number = _read_status(pid)
        with self._lock:
            known = self._exits.get(pid)
            if known is not None:
                exit_ns = min(exit_ns, known.exit_ns)
                if known.exitcode is not None or known.signal_number is not None:
                    exitcode, signal_number = known.exitcode, known.signal_number
            self._exits[pid] = ProcessExit(pid, exit_ns, exitcode, signal_number)

    def _take_pending(self) -> list[int]:
        with self._lock:
            pending, self._pending = self._pending, []
        return pending

    def _requeue(self, pids: list[int]) -> None:
        """Hand pids a stopping thread still watched to the next one (those not recorded yet)."""
        with self._lock:
            self._pending.extend(pid for pid in pids if pid not in self._exits)

    def _run(self, stop: threading.Event) -> None:
        try:
            if self._use_pidfd:
                self._run_pidfd(stop)
            else:
                self._run_polling(stop)
        except Exception:  # the watcher must never take the agent down
            logger.exception("death watcher stopped; failure times fall back to detection times")

    def _run_pidfd(self, stop: threading.Event) -> None:
        poller = select.poll()
        poller.register(self._wake_read, select.POLLIN)
        fd_to_pid: dict[int, int] = {}
        try:
            while not stop.is_set():
                for pid in self._take_pending():
                    try:
                        fd = os.pidfd_open(pid)
                    except ProcessLookupError:
                        self._record(pid, time.time_ns())  # gone before we looked: best we know
                        continue
                    fd_to_pid[fd] = pid
                    poller.register(fd, select.POLLIN)
                events = poller.poll()
                now_ns = time.time_ns()
                for fd, _ in events:
                    if fd == self._wake_read:
                        os.read(self._wake_read, 4096)
                        continue
                    pid = fd_to_pid.pop(fd)
                    poller.unregister(fd)
                    os.close(fd)
                    self._record(pid, now_ns)
        finally:
            for fd in fd_to_pid:
                os.close(fd)
            self._requeue(list(fd_to_pid.values()))

    def _run_polling(self, stop: threading.Event) -> None:
        live: set[int] = set()
        try:
            while not stop.is_set():
                live.update(self._take_pending())
                now_ns = time.time_ns()
                for pid in list(live):
                    running = _still_running(pid)
                    if running is False or running is None:
                        live.discard(pid)
                        self._record(pid, now_ns)
                stop.wait(self._fallback_poll_s)
        finally:
            self._requeue(sorted(live))
