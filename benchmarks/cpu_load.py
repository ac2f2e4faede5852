"""Busy processes that compete for the CPU while a benchmark runs (``--load N``).

Why: CI and developers' machines run other work beside ours; a failure path or a verdict that holds
only on an idle machine does not hold. Each busy process spins in pure Python (one core's worth of
demand) until the block ends; they are killed even if the benchmark fails, and end by themselves
when the benchmark process is gone (killed by a signal that skips its clean-up), never orphaned.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def busy_processes(count: int) -> Iterator[list[int]]:
    """Run ``count`` CPU-bound processes for the duration of the block; yields their pids."""
    spin = f"import os\nwhile os.getppid() == {os.getpid()}: pass"
    processes = [subprocess.Popen([sys.executable, "-c", spin], stdin=subprocess.DEVNULL) for _ in range(max(0, count))]
    try:
        yield [process.pid for process in processes]
    finally:
        for process in processes:
            process.kill()
        for process in processes:
            process.wait()
