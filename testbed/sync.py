"""File-system rendezvous between test workers: no sleeps decide an order."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

READY_FILE = "sigterm-ignored"


def wait_for(path: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout_s} s")
        time.sleep(0.005)


def error_file_of(local_rank: int) -> str:
    """Where torch told sibling worker ``local_rank`` to write its error file (siblings share a parent)."""
    attempt_dir = os.path.dirname(os.path.dirname(os.environ["TORCHELASTIC_ERROR_FILE"]))
    return os.path.join(attempt_dir, str(local_rank), "error.json")


def touch(path: str) -> None:
    with open(path, "w"):
        pass


def wait_until(condition: Callable[[], object], timeout_s: float, interval_s: float = 0.05) -> bool:
    """Look at ``condition`` every ``interval_s`` until it holds or ``timeout_s`` passed; its last answer."""
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(interval_s)
    return bool(condition())
