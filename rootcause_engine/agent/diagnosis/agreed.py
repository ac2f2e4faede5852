"""One report for the whole job, from what each failing pod says: the agreement's pure part. Where
the backend reads one error document per action, the last writer wins, and that is as often a
victim's pod. So each failing pod says what it saw (:class:`PodWord`), and one
:class:`AgreedReport` is made from all the words. This module decides without I/O or clocks, so the
same words always give the same report. The store exchange is
:mod:`rootcause_engine.agent.agreement`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from rootcause_core.ordering import Role, TimeSource, order_failures
from rootcause_core.roles import LOST_LINK_MARKER, role_marker
from rootcause_core.testimony import LostPod, Member, describe_lost_pod, lost_pod_from_entry, member_from_entry
from rootcause_engine.agent.diagnosis.failures import WorkerFailure
from rootcause_engine.agent.diagnosis.pipeline import Diagnosis
from rootcause_engine.agent.diagnosis.report import format_root_cause_message, format_time
from rootcause_engine.agent.diagnosis.selection import RetryRule, is_recoverable
from rootcause_engine.agent.store_values import (
    LARGE_VALUE_BYTES,
    as_dict,
    as_int,
    as_list,
    as_str,
    as_time_ns,
    dataclass_from_json,
    parse_json,
)

#: Bumped when a word's or a report's JSON changes: pods of one job run one image, so a mismatch
#: means a stray key, which is ignored.
FORMAT = 1


def failure_to_json(failure: WorkerFailure) -> dict[str, Any]:
    return {field.name: _plain(getattr(failure, field.name)) for field in dataclasses.fields(failure)}


def failure_from_json(data: object) -> WorkerFailure | None:
    """The failure in ``data`` (:func:`failure_to_json`), each field of the type its annotation
    names and its time a wall-clock time (:func:`as_time_ns`); ``None`` for anything else (a string
    where a time belongs would break the ordering, a time out of range its formatting)."""
    failure = dataclass_from_json(WorkerFailure, data)
    if not isinstance(failure, WorkerFailure) or not _time_or_none(failure.timestamp_ns):
        return None
    return failure


def _time_or_none(value: object) -> bool:
    """``value`` is absent or a wall-clock time another pod may say (:func:`as_time_ns`)."""
    return value is None or as_time_ns(value) is not None


def _lost_pod_in_word(entry: object) -> LostPod | None:
    """A lost pod of a pod's word (:func:`lost_pod_from_entry`), its last-seen time a wall-clock time."""
    peer = lost_pod_from_entry(entry)
    return peer if peer is not None and _time_or_none(peer.last_seen_ns) else None


def _valid(entries: object, parse: Any) -> tuple[Any, ...]:
    """The entries of a JSON list that ``parse`` accepts: an invalid entry is dropped, never the value."""
    return tuple(parsed for parsed in map(parse, as_list(entries) or ()) if parsed is not None)


def _format_1(text: str | bytes) -> dict[str, Any] | None:
    """The object in ``text`` if it is one of ours in :data:`FORMAT` (bounded in size and depth)."""
    data = as_dict(parse_json(text, max_bytes=LARGE_VALUE_BYTES))
    return data if data is not None and data.get("format") == FORMAT else None


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, (Role, TimeSource)) else value


@dataclasses.dataclass(frozen=True)
class PodWord:
    """What one failing pod says: who it is, its failures root cause first, the peers it found lost
    and the members it knew."""

    worker: str
    failures: tuple[WorkerFailure, ...]
    lost_pods: tuple[LostPod, ...] = ()
    members: tuple[Member, ...] = ()

    @classmethod
    def of(cls, worker: str, diagnosis: Diagnosis) -> PodWord:
        return cls(worker, diagnosis.failures, diagnosis.lost_pods, diagnosis.members)

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": FORMAT,
                "worker": self.worker,
                "failures": [failure_to_json(f) for f in self.failures],
                "lost": [peer.entry() for peer in self.lost_pods],
                "members": [member.entry() for member in self.members],
            }
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> PodWord | None:
        """The word in ``text``; ``None`` for anything that is not one (a stray, torn or forged
        value, a failure that is not one included: the failures are what a word says). A lost pod
        or member that is not valid is left out, the rest kept, as in a testimony."""
        data = _format_1(text)
        worker = None if data is None else as_str(data.get("worker"))
        failures = None if data is None else as_list(data.get("failures"))
        if data is None or worker is None or failures is None:
            return None
        parsed = _valid(failures, failure_from_json)
        if len(parsed) != len(failures):
            return None
        return cls(
            worker=worker,
            failures=parsed,
            lost_pods=_valid(data.get("lost"), _lost_pod_in_word),
            members=_valid(data.get("members"), member_from_entry),
        )


@dataclasses.dataclass(frozen=True)
class AgreedReport:
    """The job's one report: the text every pod writes, whether a retry may help, and the root cause."""

    message: str
    recoverable: bool
    worker: str | None
    global_rank: int | None
    timestamp_ns: int | None
    #: the pods whose words it holds, by name
    testified: tuple[str, ...]
    #: every failure of every pod that spoke, root cause first (for a timeline)
    failures: tuple[WorkerFailure, ...] = ()

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": FORMAT,
                "message": self.message,
                "recoverable": self.recoverable,
                "worker": self.worker,
                "global_rank": self.global_rank,
                "timestamp_ns": self.timestamp_ns,
                "testified": list(self.testified),
                "failures": [failure_to_json(f) for f in self.failures],
            }
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> AgreedReport | None:
        """The report in ``text``; ``None`` for anything that is not one, a field of the wrong type
        included (every pod writes what it reads here: it must be a report of ours)."""
        data = _format_1(text)
        if data is None:
            return None
        message, recoverable, testified = as_str(data.get("message")), data.get("recoverable"), data.get("testified")
        worker, global_rank, timestamp_ns = data.get("worker"), data.get("global_rank"), data.get("timestamp_ns")
        failures = as_list(data.get("failures"))
        if (
            message is None
            or not isinstance(recoverable, bool)
            or not (worker is None or isinstance(worker, str))
            or not (global_rank is None or as_int(global_rank, low=0) is not None)
            or not _time_or_none(timestamp_ns)
            or not isinstance(testified, list)
            or not all(isinstance(pod, str) for pod in testified)
            or failures is None
        ):
            return None
        parsed = _valid(failures, failure_from_json)
        if len(parsed) != len(failures):
            return None
        return cls(message, recoverable, worker, global_rank, timestamp_ns, tuple(testified), parsed)


def agreed_report(
    words: Sequence[PodWord], *, noticed_ns: int | None = None, retry_rule: RetryRule = RetryRule.ON_REQUEST
) -> AgreedReport:
    """The one report made of ``words`` (at least one, each with at least one failure).

    Pure and order-free: the words are taken in pod-name order, so any pod that holds the same
    words makes the same report. ``noticed_ns``: when the peers lost contact with a lost pod
    (default: the earliest failure's time). ``retry_rule``: whether the root cause allows a retry
    (a lost pod always does).
    """
    if not words or not any(word.failures for word in words):
        raise ValueError("an agreed report needs at least one pod's word with a failure")
    words = sorted(words, key=lambda word: word.worker)
    testified = tuple(word.worker for word in words)
    failures = order_failures(failure for word in words for failure in word.failures)
    lost = _lost_pods(words, set(testified))
    members = {member.worker: member for word in words for member in word.members}
    root = failures[0]
    noticed = noticed_ns if noticed_ns is not None else min(
        (f.timestamp_ns for f in failures if f.timestamp_ns is not None), default=None
    )
    sections = []
    if root.role == Role.VICTIM and lost:
        # nobody failed on their own: the pod that went silent is the cause (a lost node writes nothing)
        head = lost[0]
        sections.append(_lost_pod_line(head, members.get(head.worker), noticed))
        sections.append(format_root_cause_message(failures).replace(role_marker(Role.VICTIM), "victim:", 1))
        worker, rank, at = head.named(), _first_rank(members.get(head.worker)), head.last_seen_ns or noticed
        recoverable = True
    else:
        sections.append(format_root_cause_message(failures))
        worker, rank, at = root.worker, root.global_rank, root.timestamp_ns
        recoverable = is_recoverable(failures, retry_rule)
    for peer in lost:
        sections.append(describe_lost_pod(peer, noticed_ns=noticed or 0))
    sections.append(f"Agreed by the failing pods: {', '.join(testified)}.")
    return AgreedReport(
        message="\n\n".join(sections),
        recoverable=recoverable,
        worker=worker,
        global_rank=rank,
        timestamp_ns=at,
        testified=testified,
        failures=tuple(failures),
    )


def _lost_pods(words: Sequence[PodWord], testified: set[str]) -> list[LostPod]:
    """The peers some pod found lost and that said nothing themselves, by group rank (one each)."""
    found: dict[str, LostPod] = {}
    for word in words:
        for peer in word.lost_pods:
            if peer.worker in testified:
                continue
            known = found.get(peer.worker)
            if known is None or (peer.last_seen_ns or 0) > (known.last_seen_ns or 0):
                found[peer.worker] = peer
    return sorted(found.values(), key=lambda peer: (peer.group_rank, peer.worker))


def _first_rank(member: Member | None) -> int | None:
    return None if member is None else member.first_rank


def _lost_pod_line(peer: LostPod, member: Member | None, noticed_ns: int | None) -> str:
    """The first line for a lost pod: marker, its ranks, when it was last seen, what is known."""
    ranks = "rank ?" if member is None else _ranks(member)
    at = peer.last_seen_ns if peer.last_seen_ns is not None else noticed_ns
    if peer.link_with is not None:
        return (
            f"{LOST_LINK_MARKER} the network link between {peer.link_with} and {peer.worker} ({ranks}, group rank "
            f"{peer.group_rank}) was lost at {format_time(noticed_ns)}: both pods lived and each lost its only peer"
        )
    return (
        f"{role_marker(Role.LOST_POD)} {ranks} (group rank {peer.group_rank}) on worker {peer.worker} "
        f"failed at {format_time(at)} (last seen alive): the pod wrote nothing and every other pod lost it"
    )


def _ranks(member: Member) -> str:
    ranks = member.global_ranks
    return f"rank {ranks.start}" if len(ranks) == 1 else f"rank {ranks.start} (ranks {ranks.start}-{ranks.stop - 1})"
