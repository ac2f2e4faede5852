"""An agent whose monitor loop blocks forever: the agent watchdog must end it and report the root cause.

Usage: ``python -m tests.watchdog_tasks.hung_agent OUT_JSON MARKER_DIR``. Registers a failure sink
that writes what it is given to ``OUT_JSON``, makes ``LocalElasticAgent._monitor_workers`` block
(the agent never notices its workers died, never tears down, never returns), then runs the task.
Only the watchdog can end this process; if the task ever returns, the exit status is 99.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from rootcause_engine.agent.failure_sink import register_failure_sink
from rootcause_harness.faults import hang_agent_monitor
from tests.watchdog_tasks.tasks import dies_under_a_hung_agent


def write_json(path: str) -> Any:
    def write(error: BaseException) -> None:
        failures = getattr(error, "failures", ())
        document = {
            "type": type(error).__name__,
            "report": getattr(error, "report", str(error)),
            "failures": [
                {
                    "rank": f.global_rank,
                    "worker": f.worker,
                    "pid": f.pid,
                    "role": f.role.value,
                    "signal": f.signal_name,
                    "exception_type": f.exception_type,
                }
                for f in failures
            ],
        }
        with open(path, "w") as handle:
            json.dump(document, handle)

    return write


if __name__ == "__main__":
    out_path, marker_dir = sys.argv[1], sys.argv[2]
    hang_agent_monitor()
    register_failure_sink(write_json(out_path), destination=out_path)
    dies_under_a_hung_agent(marker_dir=marker_dir)
    sys.exit(99)
