"""One way for the tests to make the engine's ``WorkerFailure``: plain defaults, the fields a test is about.

A failure has sixteen fields; a test states the few it is about (a signal, a time, a role) and
gets the rest consistent with a job of ``nproc`` workers per pod: local and group rank, the pod
``pod-<group rank>``, a pid of its own.
"""

from __future__ import annotations

from typing import Any

from rootcause_core.ordering import Role, TimeSource
from rootcause_engine.agent.diagnosis.failures import WorkerFailure


def worker_failure(rank: int = 0, *, role: Role = Role.CANDIDATE, timestamp_ns: int | None = 1, nproc: int = 2,
                   **fields: Any) -> WorkerFailure:
    """Global rank ``rank``'s failure, observed (not recorded) at ``timestamp_ns``; ``fields`` override."""
    values: dict[str, Any] = {
        "global_rank": rank, "local_rank": rank % nproc, "group_rank": rank // nproc, "worker": f"pod-{rank // nproc}",
        "host": "h", "pid": 100 + rank, "exitcode": None, "signal_number": None, "exception_type": None,
        "message": "", "traceback": "", "timestamp_ns": timestamp_ns, "time_source": TimeSource.OBSERVED,
        "role": role, "recoverable": False,
    }  # fmt: skip
    values.update(fields)
    return WorkerFailure(**values)
