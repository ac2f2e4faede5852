"""The soft-restart world's keys in the job's store, as typed operations named for what they do.

Why: the soft world (:mod:`.soft_world`) agrees on each next world through a handful of key
families. Spelt as raw store calls beside the agreement's logic, each family's encoding and check
would be repeated at every use. Here each is written once, and the agreement reads as what it does
(``worlds.claim``, ``arrive``, ``decide``). Every operation goes through one bounded client. The
error policy, the same for every method: ``docs/soft_restarts.md``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import Any

from rootcause_engine.agent.bounded_store import BoundedStore
from rootcause_engine.agent.event_log import Event, EventLog
from rootcause_engine.agent.store_values import (
    MAX_COUNT,
    StoreCall,
    as_dict,
    as_int,
    bad_value,
    bump_counter,
    int_value,
    json_value,
    read_value,
    text_value,
)
from rootcause_engine.store_layout import (
    SOFT_ADDED_KEY,
    SOFT_FINISHED_KEY,
    SOFT_JOB_KEY,
    SOFT_LOG_LENGTH_KEY,
    soft_arrive_key,
    soft_decided_key,
    soft_exit_key,
    soft_log_key,
    soft_lost_key,
    soft_world_key,
)

#: A world's decisions: every member arrived, or it will not form.
FORMED, ABANDONED = "formed", "abandoned"
#: The most membership changes a job's log may hold. A node restarts once (its second failure ends
#: the job), so a job logs a few changes per node; a longer log is not one of ours, and reading it
#: would cost every node that many store reads.
MAX_LOG_ENTRIES = 4096
#: The membership log's kinds of event: a node ``leave``s (it restarts its workers), ``join``s (its
#: workers are ready again), fails for good (``fatal``) or is ``lost``.
JOB_KINDS = ("leave", "join", "fatal", "lost")


class SoftWorldStore:
    """The soft world's keys in ``store`` (torch's), each operation within ``timeout_s`` (see the
    module docstring for the serialisation and the error policy): one object per family, :attr:`job`,
    :attr:`log` and :attr:`worlds`."""

    def __init__(self, store: Any, timeout_s: float) -> None:
        self._client = BoundedStore(store, timeout_s, name="rendezvous store (soft restarts)")
        self.job = JobKeys(self._client.call)
        self.log = MembershipLog(self._client.call)
        self.worlds = WorldKeys(self._client.call)

    def close(self) -> None:
        """Release the bounded client's helper thread (the loop is over)."""
        self._client.close()


class JobKeys:
    """The job: its announcement, the pods added later, its end."""

    def __init__(self, call: StoreCall) -> None:
        self._call = call

    def announce(self, nodes: int) -> None:
        """The job runs with a first world of ``nodes`` nodes (``job``)."""
        self._call("set", SOFT_JOB_KEY, json.dumps({"nodes": nodes}))

    def nodes(self) -> int | None:
        """The first world's node count of the running job; ``None`` when none runs yet, or when the
        value is no node count (logged: the pod then takes part in torch's rendezvous)."""
        entry = as_dict(json_value(read_value(self._call, SOFT_JOB_KEY), SOFT_JOB_KEY))
        nodes = None if entry is None else as_int(entry.get("nodes"), low=1, high=MAX_COUNT)
        if entry is not None and nodes is None:
            bad_value(SOFT_JOB_KEY, "no node count")
        return nodes

    def count_added_pod(self) -> int | None:
        """One more pod joined the running job (``added``): how many did so far, this one included;
        ``None`` (nothing written) when the counter holds no count."""
        return bump_counter(self._call, SOFT_ADDED_KEY)

    def mark_finished(self) -> None:
        """A node's workers all returned: the training is over (``finished``)."""
        self._call("set", SOFT_FINISHED_KEY, str(time.time_ns()))

    def finished(self) -> bool:
        return bool(self._call("check", [SOFT_FINISHED_KEY]))

    def mark_exited(self, node: int) -> None:
        """Node ``node`` reached the end of the job (``exit/<node>``)."""
        self._call("set", soft_exit_key(node), str(time.time_ns()))

    def all_exited(self, nodes: Iterable[int]) -> bool:
        """Whether every node of ``nodes`` reached the end of the job (one store call)."""
        return bool(self._call("check", [soft_exit_key(node) for node in nodes]))


class MembershipLog:
    """The membership log: each node's leave, join, failure for good or loss, in one order."""

    def __init__(self, call: StoreCall) -> None:
        self._call = call
        self._log = EventLog(SOFT_LOG_LENGTH_KEY, soft_log_key, kinds=JOB_KINDS, max_rank=MAX_COUNT,
                             max_entries=MAX_LOG_ENTRIES)

    def append(self, change: Event) -> int | None:
        """Write ``change`` at the end of the log: its number; ``None`` when the log is full or its
        counter holds no count that could be repaired."""
        return self._log.append(self._call, change)

    def length(self) -> int | None:
        """How many changes were numbered; ``None`` when the counter holds no count."""
        return self._log.length(self._call)

    def changes_through(self, length: int, *, poll_s: float) -> tuple[Event, ...]:
        """The valid changes among entries 1 to ``length`` (a gap waited for, polling every
        ``poll_s``, then voided: every node reads the same changes)."""
        return self._log.read_through(self._call, length, poll_s=poll_s)

    def claim_lost(self, node: int, by: int) -> bool:
        """Whether node ``by`` is the first to log node ``node`` lost (``lost/<node>``, first writer
        wins); a claim that is not a node's is nobody's."""
        key = soft_lost_key(node)
        return text_value(self._call("compare_set", key, "", str(by)), key) == str(by)


class WorldKeys:
    """The worlds: proposals, arrivals, decisions."""

    def __init__(self, call: StoreCall) -> None:
        self._call = call

    def claim(self, version: int, length: int) -> int | None:
        """Propose world ``version`` as the log's first ``length`` changes; the length of whichever
        proposal won (the first: ``world/<v>``), ``None`` for one that is no length."""
        key = soft_world_key(version)
        return int_value(self._call("compare_set", key, "", str(length)), key, high=MAX_LOG_ENTRIES)

    def proposed(self, version: int) -> bool:
        """Whether world ``version`` was proposed (one store round trip)."""
        return bool(self._call("check", [soft_world_key(version)]))

    def length(self, version: int) -> int | None:
        """The log length world ``version``'s proposal covers; ``None`` when absent or no length."""
        key = soft_world_key(version)
        return int_value(read_value(self._call, key), key, high=MAX_LOG_ENTRIES)

    def arrive(self, version: int, node: int) -> None:
        """Node ``node`` is ready for world ``version`` (``arrive/<v>/<node>``)."""
        self._call("set", soft_arrive_key(version, node), str(time.time_ns()))

    def arrived(self, version: int, node: int) -> bool:
        return self.all_arrived(version, [node])

    def all_arrived(self, version: int, nodes: Iterable[int]) -> bool:
        """Whether every node of ``nodes`` arrived at world ``version`` (one store call)."""
        return bool(self._call("check", [soft_arrive_key(version, node) for node in nodes]))

    def decision(self, version: int) -> str | None:
        """World ``version``'s decision: ``None`` while undecided, else ``formed`` or ``abandoned``."""
        key = soft_decided_key(version)
        return _decision_text(read_value(self._call, key), key)

    def decide(self, version: int, decision: str) -> str:
        """Propose ``decision`` for world ``version``; the one that won (the first: ``decided/<v>``)."""
        key = soft_decided_key(version)
        won = _decision_text(self._call("compare_set", key, "", decision), key)
        return won if won is not None else ABANDONED


def _decision_text(value: bytes | None, key: str) -> str | None:
    """A decision read from ``key``: ``None`` when absent; one that is neither ``formed`` nor
    ``abandoned`` counts as ``abandoned`` (logged): every node reads the same bytes."""
    text = text_value(value, key, max_bytes=16)
    if value is not None and text not in (FORMED, ABANDONED):
        bad_value(key, "neither formed nor abandoned")
        return ABANDONED
    return text
