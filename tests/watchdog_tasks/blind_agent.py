"""An agent whose torch monitor loop believes every worker runs and whose death watcher is blind.

Usage: ``python -m tests.watchdog_tasks.blind_agent OUT_JSON MARKER_DIR``. Two faults at once:

- ``MultiprocessContext._poll`` always answers "still running" (torch's monitor loop reads HEALTHY
  whatever its workers do: the reported stall), and
- the death watcher's thread never starts (it records no exit by itself),

then it runs a task whose rank 1 raises while rank 0 lingers ignoring SIGTERM. Only the agent
watchdog, asking the kernel about each worker itself, can end this process; if the task ever
returns, the exit status is 99.
"""

from __future__ import annotations

import sys
from typing import Any

from torch.distributed.elastic.multiprocessing.api import MultiprocessContext

from rootcause_engine.agent.death_watcher import DeathWatcher
from rootcause_engine.agent.failure_sink import register_failure_sink
from tests.watchdog_tasks.hung_agent import write_json
from tests.watchdog_tasks.tasks import fails_under_a_blind_agent


def _always_running(self: Any) -> None:
    return None


def _watch_nothing(self: Any, stop: Any) -> None:
    return None


if __name__ == "__main__":
    out_path, marker_dir = sys.argv[1], sys.argv[2]
    MultiprocessContext._poll = _always_running  # type: ignore[method-assign]
    DeathWatcher._run = _watch_nothing  # type: ignore[method-assign]
    register_failure_sink(write_json(out_path), destination=out_path)
    fails_under_a_blind_agent(marker_dir=marker_dir)
    sys.exit(99)
