"""End processes the agent can no longer end itself: SIGTERM, a grace period, then SIGKILL.

torch's own teardown (``PContext._close``) reaps as it goes and needs the agent's thread. The agent
watchdog runs when that thread is stuck, and the launch observer must leave the reaping to torch's
join, so both end workers by pid here and learn that they are gone from the kernel without reaping
(the death watcher): the pids cannot be recycled under them while they are signalled.
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


def spare_s(grace_s: float) -> float:
    """How long a process on its way out is left to exit by itself before its SIGTERM: half the grace,
    at most 2 s (a failed worker's unwinding takes 1-2 s on a loaded machine)."""
    return min(grace_s / 2, 2.0)


def terminate_then_kill(pids: Iterable[int], *, grace_s: float, exited: Callable[[int], bool],
                        spared: Iterable[int] = ()) -> list[int]:
    """SIGTERM every live pid, SIGKILL those still alive after ``grace_s``; wait up to ``grace_s`` more.
    ``spared`` pids (on their way out) get their SIGTERM only if still alive after :func:`spare_s`.

    Returns the pids still not gone at the end (a process in uninterruptible sleep survives
    SIGKILL until the kernel lets it go; the caller reports it and moves on).
    """
    spared = set(spared)
    alive = [pid for pid in pids if not exited(pid)]
    _signal_all([pid for pid in alive if pid not in spared], signal.SIGTERM)
    waited_s = spare_s(grace_s) if spared & set(alive) else 0.0
    alive = _wait_until_gone(alive, exited, waited_s)
    _signal_all([pid for pid in alive if pid in spared], signal.SIGTERM)
    alive = _wait_until_gone(alive, exited, grace_s - waited_s)
    _signal_all(alive, signal.SIGKILL)
    return _wait_until_gone(alive, exited, max(grace_s, 1.0))
