"""The one rule that orders failures, root cause first.

The pod's agent orders the failures of its workers. The backend reader orders the error files of all
pods. If the two used different rules, the pod and propeller could name different root causes. So
both import this one rule, and the listing key of an error file's name comes from it too
(:func:`role_time_key`). In short: candidates before lost pods before victims, then earliest first,
then a total order of ties. It is pure, with no I/O and no clocks, so the same inputs always give
the same answer. ``docs/messages.md`` spells out each step.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Protocol, TypeVar


class Role(enum.StrEnum):
    """Why a worker failed, as far as its own evidence tells."""

    CANDIDATE = "candidate"
    #: A pod that wrote nothing itself (lost node, preemption, eviction), named by its peers'
    #: testimony (``rootcause_core.testimony``): a cause, but hearsay, so after any own report. Its
    #: value keeps the older word: the reports and ``backend_reader``'s output print it.
    LOST_POD = "lost-peer"
    VICTIM = "victim"


_ROLE_RANK = {Role.CANDIDATE: 0, Role.LOST_POD: 1, Role.VICTIM: 2}


class TimeSource(enum.StrEnum):
    """How a failure's time was known, most precise first.

    ``RECORDED``: the worker stamped the exception itself; ``OBSERVED``: the agent's death watcher saw
    the process exit; ``DETECTED``: the agent's monitor loop noticed the failure (up to
    ``monitor_interval`` late); ``REPORTED``: a timestamp read back from a Flyte error document;
    ``LAST_PROGRESS``: a worker that hung: when it was last seen making progress (it entered its
    last collective then); ``UNKNOWN``: no time at all.
    """

    RECORDED = "recorded"
    OBSERVED = "observed"
    DETECTED = "detected"
    REPORTED = "reported"
    LAST_PROGRESS = "last-progress"
    UNKNOWN = "unknown"


class OrderableFailure(Protocol):
    """What the rule needs of a failure; both sides' records provide these attributes."""

    @property
    def role(self) -> Role: ...

    @property
    def timestamp_ns(self) -> int | None: ...

    @property
    def global_rank(self) -> int | None: ...

    @property
    def worker(self) -> str: ...

    @property
    def source(self) -> str: ...


F = TypeVar("F", bound=OrderableFailure)

_NO_VALUE = 1  # sorts a missing time or rank after every present one


def role_time_key(role: Role, timestamp_ns: int | None) -> tuple[int, int, int]:
    """The first two steps of the rule (role, then time) as a sort key; a prefix of ``root_cause_key``.

    The reader uses it alone where only role and time are known (from an error file's name, see
    ``rootcause_core.error_files``): equal prefixes still need the full key to break the tie.
    """
    return (
        _ROLE_RANK[role],
        _NO_VALUE if timestamp_ns is None else 0,
        0 if timestamp_ns is None else timestamp_ns,
    )


def root_cause_key(failure: OrderableFailure) -> tuple[int, int, int, int, int, str, str]:
    """Sort key implementing the rule above; smaller is more likely the root cause."""
    rank = failure.global_rank
    return (
        *role_time_key(failure.role, failure.timestamp_ns),
        _NO_VALUE if rank is None else 0,
        0 if rank is None else rank,
        failure.worker or "",
        failure.source or "",
    )


def order_failures(failures: Iterable[F]) -> list[F]:
    """Return the failures in root-cause order (first element is the root cause)."""
    return sorted(failures, key=root_cause_key)


def pick_root_cause(failures: Iterable[F]) -> F | None:
    """The first failure in root-cause order, or ``None`` when there is none."""
    return min(failures, key=root_cause_key, default=None)
