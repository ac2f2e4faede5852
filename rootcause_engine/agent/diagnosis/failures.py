"""The agent-side record of one failed worker, and how its time was known."""

from __future__ import annotations

import dataclasses
import signal

from rootcause_core.ordering import Role, TimeSource
from rootcause_core.timestamps import to_seconds


def signal_name(number: int | None) -> str | None:
    """``SIGKILL`` for 9, ``SIG42`` for numbers Python has no name for, ``None`` for ``None``."""
    if number is None:
        return None
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"SIG{number}"


@dataclasses.dataclass(frozen=True)
class WorkerFailure:
    """Everything known about one failed worker process, ordered by ``rootcause_core.ordering``.

    ``timestamp_ns`` is the best known failure time, chosen as: recorded by the worker at the
    exception > exit observed by the death watcher > failure detected by the agent's monitor loop.
    """

    global_rank: int | None
    local_rank: int | None
    group_rank: int | None
    worker: str
    host: str
    pid: int | None
    exitcode: int | None
    signal_number: int | None
    exception_type: str | None
    message: str
    traceback: str
    timestamp_ns: int | None
    time_source: TimeSource
    role: Role
    #: the worker's exception asked for a retry (flytekit's rule, ``selection.RetryRule``)
    recoverable: bool
    source: str = ""
    attempt: int = 0
    #: the worker's exception forbade a retry (Flyte 2's rule)
    retry_refused: bool = False

    @property
    def signal_name(self) -> str | None:
        return signal_name(self.signal_number)

    @property
    def timestamp_s(self) -> float | None:
        """Seconds since the epoch as a float (what Flyte exceptions carry)."""
        return None if self.timestamp_ns is None else to_seconds(self.timestamp_ns)

    def with_role(self, role: Role) -> WorkerFailure:
        return dataclasses.replace(self, role=role)
