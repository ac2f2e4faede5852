"""End processes the agent can no longer end itself: SIGTERM, a grace period, then SIGKILL.

torch's own teardown (``PContext._close``) SIGTERMs every live worker alike and needs the agent's
thread. The agent watchdog runs when that thread is stuck, and the launch observer must spare a
worker that is already exiting on its own, so both end workers by pid here and learn that they are
gone from the death watcher, which never reaps: the pids cannot be recycled under it while it
signals them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterable

#: How often the survivors are checked during the grace period.
POLL_S = 0.01


def _signal_all(pids: Iterable[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def _wait_until_gone(pids: list[int], exited: Callable[[int], bool], timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    alive = [pid for pid in pids if not exited(pid)]
    while alive and time.monotonic() < deadline:
        time.sleep(POLL_S)
        alive = [pid for pid in alive if not exited(pid)]
    return alive


def terminate_then_kill(
    pids: Iterable[int], *, grace_s: float, exited: Callable[[int], bool], spared: Iterable[int] = ()
) -> list[int]:
    """SIGTERM every live pid, SIGKILL those still alive after ``grace_s``; wait up to ``grace_s`` more.

    ``spared`` pids get no SIGTERM, only the SIGKILL if they outlive the grace: they are exiting on
    their own (a worker that recorded its exception is unwinding), and a SIGTERM handler running in
    the middle of that (inherited from the agent with the ``fork`` start method) would cut short the
    error file torch is writing. Returns the pids still not gone at the end (a process in
    uninterruptible sleep survives SIGKILL until the kernel lets it go; the caller reports it).
    """
    alive = [pid for pid in pids if not exited(pid)]
    spare = set(spared)
    _signal_all([pid for pid in alive if pid not in spare], signal.SIGTERM)
    alive = _wait_until_gone(alive, exited, grace_s)
    _signal_all(alive, signal.SIGKILL)
    return _wait_until_gone(alive, exited, max(grace_s, 1.0))
