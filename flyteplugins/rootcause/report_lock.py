"""One writer at a time for the action's ``report.html``, from every process of this pod.

``a0``'s flush reads the page back, merges its tabs and writes it again. Another flush between that
read and that write would be lost. And a local write is not atomic, so a page read mid-write is torn.
So every flush of this plugin's takes this lock around its read and write: a thread lock within a
process, and a file lock across the pod's processes. Pods need no shared lock, since the store writes
the page whole. The wait is bounded (:data:`LOCK_TIMEOUT_S`), because the report is a view and must
never hold up the task. ``docs/flyte2.md`` has the details.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import urlparse

try:
    import fcntl
except ImportError:  # not POSIX: the in-process lock alone
    fcntl = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

#: How long a flush waits for the lock before it flushes without it.
LOCK_TIMEOUT_S = 5.0
#: How often a waiting flush tries again (``flock`` is taken without blocking, so the wait stays bounded).
POLL_S = 0.01
#: Where the lock files of pages in the object store go, under the temporary directory.
REMOTE_LOCKS_DIR = "rootcause-report-locks"

#: The in-process lock of each page. Taken with one ``dict.setdefault`` (atomic in CPython: a string
#: key's hash and comparison run no Python code), so every thread gets the same lock without a guard.
_in_process: dict[str, threading.Lock] = {}


def lock_file_of(report_path: str) -> Path:
    """The lock file of ``report_path``: beside a local page, else one per page URL in the pod's
    temporary directory (which all of the pod's processes share)."""
    parsed = urlparse(report_path)
    if parsed.scheme in ("", "file") or len(parsed.scheme) == 1:  # a path, file://, or a drive letter
        page = Path(parsed.path if parsed.scheme == "file" else report_path)
        return page.with_name(f".{page.name}.lock")
    digest = hashlib.sha256(report_path.encode("utf-8")).hexdigest()[:32]
    return Path(tempfile.gettempdir()) / REMOTE_LOCKS_DIR / f"{digest}.lock"


class _Attempt:
    """Taking the page's two locks without blocking, again until taken or given up."""

    def __init__(self, report_path: str) -> None:
        self.report_path = report_path
        self._thread_lock = _in_process.setdefault(report_path, threading.Lock())
        self._has_thread_lock = False
        self._fd: int | None = None
        self._file_lock_broken = fcntl is None
        self.held = False

    def try_take(self) -> bool:
        """One try at whichever lock is not held yet; ``True`` once both are."""
        if not self._has_thread_lock:
            self._has_thread_lock = self._thread_lock.acquire(blocking=False)
            if not self._has_thread_lock:
                return False
        if not self._file_lock_broken and self._fd is None:
            self._fd = self._open_lock_file()
        if self._fd is not None:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            except OSError as error:  # a filesystem without flock: the in-process lock alone
                self._give_up_file_lock(f"cannot lock {lock_file_of(self.report_path)} ({error})")
        self.held = True
        return True

    def _open_lock_file(self) -> int | None:
        path = lock_file_of(self.report_path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            return os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as error:
            self._give_up_file_lock(f"cannot open {path} ({error})")
            return None

    def _give_up_file_lock(self, why: str) -> None:
        logger.warning("%s: %s is flushed without the lock of the pod's other processes", why, self.report_path)
        self._file_lock_broken = True
        self._close()

    def waiting(self, deadline: float, timeout_s: float) -> bool:
        """One try: ``True`` while the locks are not taken and ``deadline`` (monotonic) has not passed
        (poll again); ``False`` once taken, or given up at the deadline."""
        if self.try_take():
            return False
        if time.monotonic() >= deadline:
            self.give_up(timeout_s)
            return False
        return True

    def give_up(self, timeout_s: float) -> None:
        """Not taken in time: release what was taken and flush without the lock, as before it."""
        logger.warning("the lock of %s was not taken within %.1f s: flushing without it (a flush at the same "
                       "time may be lost)", self.report_path, timeout_s)
        self.release()

    def release(self) -> None:
        self.held = False
        self._close()
        if self._has_thread_lock:
            self._has_thread_lock = False
            self._thread_lock.release()

    def _close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # drops the flock with it


@contextlib.asynccontextmanager
async def report_lock(report_path: str, timeout_s: float | None = None) -> AsyncIterator[bool]:
    """Hold ``report_path``'s lock for a read-modify-write of the page, polling without blocking the
    event loop; yields whether it is held (``False``: given up after ``timeout_s``, by default
    :data:`LOCK_TIMEOUT_S`, flush anyway)."""
    timeout_s = LOCK_TIMEOUT_S if timeout_s is None else timeout_s
    attempt = _Attempt(report_path)
    deadline = time.monotonic() + timeout_s
    try:
        while attempt.waiting(deadline, timeout_s):
            await asyncio.sleep(POLL_S)
        yield attempt.held
    finally:
        attempt.release()


@contextlib.contextmanager
def report_lock_sync(report_path: str, timeout_s: float | None = None) -> Iterator[bool]:
    """:func:`report_lock` for a caller without an event loop (a worker's flush)."""
    timeout_s = LOCK_TIMEOUT_S if timeout_s is None else timeout_s
    attempt = _Attempt(report_path)
    deadline = time.monotonic() + timeout_s
    try:
        while attempt.waiting(deadline, timeout_s):
            time.sleep(POLL_S)
        yield attempt.held
    finally:
        attempt.release()
