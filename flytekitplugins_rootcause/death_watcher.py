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
        self._stop = threading.Event()
        self._wake_read, self._wake_write = os.pipe()
        self._thread = threading.Thread(target=self._run, name="rootcause-death-watcher", daemon=True)

    @property
    def uses_pidfd(self) -> bool:
        return self._use_pidfd

    def __enter__(self) -> DeathWatcher:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

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

    def close(self) -> None:
        """Stop the thread and release its file descriptors (idempotent)."""
        if self._stop.is_set():
            return
        self._stop.set()
        with contextlib.suppress(OSError):
            os.write(self._wake_write, b"x")
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        for fd in (self._wake_read, self._wake_write):
            with contextlib.suppress(OSError):
                os.close(fd)

    def _record(self, pid: int, exit_ns: int) -> None:
        exitcode, signal_number = _read_status(pid)
        with self._lock:
            self._exits.setdefault(pid, ProcessExit(pid, exit_ns, exitcode, signal_number))

    def _take_pending(self) -> list[int]:
        with self._lock:
            pending, self._pending = self._pending, []
        return pending

    def _run(self) -> None:
        try:
            if self._use_pidfd:
                self._run_pidfd()
            else:
                self._run_polling()
        except Exception:  # the watcher must never take the agent down
            logger.exception("death watcher stopped; failure times fall back to detection times")

    def _run_pidfd(self) -> None:
        poller = select.poll()
        poller.register(self._wake_read, select.POLLIN)
        fd_to_pid: dict[int, int] = {}
        while not self._stop.is_set():
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
        for fd in fd_to_pid:
            os.close(fd)

    def _run_polling(self) -> None:
        live: set[int] = set()
        while not self._stop.is_set():
            live.update(self._take_pending())
            now_ns = time.time_ns()
            for pid in list(live):
                running = _still_running(pid)
                if running is False or running is None:
                    live.discard(pid)
                    self._record(pid, now_ns)
            self._stop.wait(self._fallback_poll_s)
