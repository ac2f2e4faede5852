"""Freezing a process the way a frozen node freezes, and knowing that it did.

``kill(pid, SIGSTOP)`` returns once the signal is queued, not once every thread of the target has
stopped: on a busy machine a thread of it (a store server's loop) may still answer a request sent
right after. Tests that need the freeze to have happened wait for it here.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def _states(pid: int) -> list[str]:
    """The scheduler state letter of every thread of ``pid`` (``T``: stopped)."""
    states = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        states.append(stat.rsplit(")", 1)[1].split()[0])
    return states


def stop_process(pid: int, timeout_s: float = 30.0) -> None:
    """SIGSTOP ``pid`` and return once every one of its threads is stopped."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + timeout_s
    while not all(state in ("T", "t") for state in _states(pid)):
        if time.monotonic() >= deadline:
            raise TimeoutError(f"process {pid} did not stop within {timeout_s} s of SIGSTOP")
        time.sleep(0.001)
