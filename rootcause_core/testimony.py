"""A pod's testimony: the facts about its failure that ``ContainerError`` has no field for.

Upstream propeller picks the document with the strictly earliest ``ContainerError.timestamp``. A
victim fails milliseconds after the root cause, so a little clock skew would make the console name a
victim. Victims know they are victims, so a victim pod stamps its document
:data:`VICTIM_STAMP_DELAY_NS` late. The true time then travels here, in the message.
So this project's reader still shows every failure when it happened. Pods also testify about their
peers, since a pod that vanishes leaves no error of its own. A survivor's document for a lost pod is
stamped :data:`LOST_POD_STAMP_DELAY_NS` late, between a root cause's and a victim's.
``docs/messages.md`` gives the line's form and fields.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import TypeVar

from rootcause_core.bounded_json import loads_bounded
from rootcause_core.timestamps import rfc3339_ns

#: Starts the testimony line; the version changes when a field's meaning does.
TESTIMONY_TAG = "[rootcause testimony v1] "

#: How far after its failure a victim pod stamps its error document (see the module docstring).
#: Far more than the clock skew between nodes of a working cluster (NTP keeps them within
#: milliseconds); and bounded, so that when every document is a victim's (nobody could name the
#: cause), the time the console shows is still near the failure.
VICTIM_STAMP_DELAY_NS = 60 * 1_000_000_000

#: How far after its peers lost it a document written *for* a lost pod is stamped (see the module
#: docstring): between a real root cause (0) and a victim (:data:`VICTIM_STAMP_DELAY_NS`).
LOST_POD_STAMP_DELAY_NS = 30 * 1_000_000_000

#: Longest testimony line accepted: a reader never parses an unbounded JSON text.
MAX_TESTIMONY_CHARS = 4096

_MAX_ABS_NS = 2**63 - 1

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Member:
    """One pod of the attempt, as the rendezvous placed it."""

    group_rank: int
    worker: str
    first_rank: int
    workers: int
    hosts_store: bool = False

    @property
    def global_ranks(self) -> range:
        return range(self.first_rank, self.first_rank + self.workers)

    def entry(self) -> list[object]:
        return [self.group_rank, self.worker, self.first_rank, self.workers, int(self.hosts_store)]


@dataclasses.dataclass(frozen=True)
class LostPod:
    """A peer pod found gone: neither did it report a failure nor did its heartbeat go on."""

    group_rank: int
    worker: str
    last_seen_ns: int | None
    #: set when only the network link between this peer and the pod named here was lost: both
    #: lived and reached as much of the rest of the world (an even split, ``rootcause_core.liveness``)
    link_with: str | None = None

    def entry(self) -> list[object]:
        base: list[object] = [self.group_rank, self.worker, self.last_seen_ns]
        return base if self.link_with is None else [*base, self.link_with]

    def named(self) -> str:
        """Who the verdict names: the lost pod, or both ends of a lost link (sorted: both ends'
        documents say the same)."""
        return self.worker if self.link_with is None else " and ".join(sorted((self.worker, self.link_with)))


@dataclasses.dataclass(frozen=True)
class PodTestimony:
    """What a pod says about its own failure, and about its peers."""

    failed_at_ns: int | None
    stamp_delay_ns: int = 0
    members: tuple[Member, ...] = ()
    member_count: int | None = None
    lost: tuple[LostPod, ...] = ()
    reported_by: str | None = None

    def stamped_ns(self) -> int | None:
        """The time the document's ``ContainerError.timestamp`` carries."""
        return None if self.failed_at_ns is None else self.failed_at_ns + self.stamp_delay_ns

    def line(self) -> str:
        """The message's last line for this testimony (members left out if it would be too long)."""
        fields: dict[str, object] = {}
        if self.failed_at_ns is not None:
            fields["failed_at_ns"] = self.failed_at_ns
        fields["stamp_delay_ns"] = self.stamp_delay_ns
        if self.reported_by is not None:
            fields["reported_by"] = self.reported_by
        if self.lost:
            fields["lost"] = [peer.entry() for peer in self.lost]
        count = self.member_count if self.member_count is not None else (len(self.members) or None)
        if count is not None:
            fields["member_count"] = count
        compact = TESTIMONY_TAG + json.dumps(fields, separators=(",", ":"), ensure_ascii=True)
        if self.members:
            full = TESTIMONY_TAG + json.dumps(
                {**fields, "members": [m.entry() for m in self.members]}, separators=(",", ":"), ensure_ascii=True
            )
            if len(full) <= MAX_TESTIMONY_CHARS:
                return full
        return compact


def for_failure(
    failed_at_ns: int | None,
    *,
    victim: bool,
    members: tuple[Member, ...] = (),
    lost: tuple[LostPod, ...] = (),
) -> PodTestimony:
    """The testimony a pod gives for its root-cause failure (its own, or a victim's)."""
    return PodTestimony(
        failed_at_ns=failed_at_ns,
        stamp_delay_ns=VICTIM_STAMP_DELAY_NS if victim else 0,
        members=members,
        lost=lost,
    )


def for_lost_pod(
    peer: LostPod, *, noticed_ns: int, reported_by: str, members: tuple[Member, ...] = ()
) -> PodTestimony:
    """The testimony on a document a survivor writes for a lost ``peer`` (see the module docstring).

    Its true time is the peer's last sign of life when known (it was lost after that), else the
    moment the survivor's workers lost their connections.
    """
    failed_at = peer.last_seen_ns if peer.last_seen_ns is not None else noticed_ns
    return PodTestimony(
        failed_at_ns=failed_at,
        stamp_delay_ns=max(0, noticed_ns + LOST_POD_STAMP_DELAY_NS - failed_at),
        members=members,
        lost=(peer,),
        reported_by=reported_by,
    )


def describe_lost_pod(peer: LostPod, *, noticed_ns: int, reported_by: str | None = None) -> str:
    """What is known of a lost pod, for a person: who, when its peers lost it, when it was last seen.

    One paragraph, shared by the victim's report (which names the peers it found lost) and the
    document a survivor writes for the lost pod (``[lost pod]`` marker in front).
    """
    seen = "never seen alive by its peers"
    if peer.last_seen_ns is not None:
        seen = f"last seen alive at {_when(peer.last_seen_ns)}"
    by = f" (reported by {reported_by})" if reported_by else ""
    if peer.link_with is not None:
        return (
            f"the network link between pod {peer.link_with} and pod {peer.worker} (group rank {peer.group_rank}) "
            f"was lost at {_when(noticed_ns)}{by}: each lost its only peer while both lived and reached as much of "
            f"the rest of the network, so neither is named lost; {peer.worker} was {seen}. Likely a network "
            "policy, a route or a firewall between their nodes: check the network between them."
        )
    return (
        f"pod {peer.worker} (group rank {peer.group_rank}) is lost: no error file from this pod; its peers "
        f"lost contact with it at {_when(noticed_ns)}{by}; {seen}. Likely a lost or frozen node, a network "
        "partition, preemption or pod eviction: check the node's and the pod's events."
    )


def _when(timestamp_ns: int) -> str:
    try:
        return rfc3339_ns(timestamp_ns)
    except (OverflowError, ValueError):  # a time no calendar holds: show the number
        return f"{timestamp_ns} ns since the epoch"


def with_testimony(message: str, testimony: PodTestimony) -> str:
    """``message`` with the testimony as its last line."""
    return f"{message.rstrip(chr(10))}\n{testimony.line()}"


def true_failure_time(stamped_ns: int | None, message: str) -> int | None:
    """The failure's time: the document's stamp, or the true time its testimony gives for a moved stamp.

    A victim pod stamps its document later than its failure so that Flyte's earliest-timestamp rule
    passes it over (see the module docstring); the testimony is trusted only when it accounts for
    the stamp exactly, so a stray or forged line cannot move a time it does not explain. Here, not
    in the reader, because a pod's file name carries this time too (``error_files``).
    """
    said = read_testimony(message)
    if said is None or not said.stamp_delay_ns or stamped_ns is None or said.stamped_ns() != stamped_ns:
        return stamped_ns
    return said.failed_at_ns


def read_testimony(message: str) -> PodTestimony | None:
    """The testimony on the message's last line; ``None`` when there is none or it is not valid."""
    _, _, last = message.rstrip("\n").rpartition("\n")
    if not last.startswith(TESTIMONY_TAG) or len(last) > MAX_TESTIMONY_CHARS:
        return None
    try:  # bounded: a forged line nested thousands deep must not raise RecursionError in the reader
        fields = loads_bounded(last[len(TESTIMONY_TAG):], max_bytes=4 * MAX_TESTIMONY_CHARS)
    except ValueError:
        return None
    if not isinstance(fields, dict):
        return None
    failed_at, delay = fields.get("failed_at_ns"), fields.get("stamp_delay_ns", 0)
    if failed_at is not None and not _is_ns(failed_at):
        return None
    if not _is_ns(delay) or delay < 0:
        return None
    reported_by = fields.get("reported_by")
    members = _members(fields.get("members"))
    count = _count(fields.get("member_count"))
    return PodTestimony(
        failed_at_ns=failed_at,
        stamp_delay_ns=delay,
        members=members,
        member_count=None if count == len(members) else count,  # kept only where members were left out
        lost=_lost(fields.get("lost")),
        reported_by=reported_by if isinstance(reported_by, str) and reported_by else None,
    )


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 1_000_000 else None


def member_from_entry(entry: object) -> Member | None:
    """The :class:`Member` of one ``members`` entry (``Member.entry()``); ``None`` when it is not valid.

    The one parser of the entry: the reader's testimony and the agent's store (``peer_watch``) use it.
    """
    if (
        isinstance(entry, list)
        and len(entry) == 5
        and all(_count(entry[i]) is not None for i in (0, 2, 3))
        and isinstance(entry[1], str)
        and entry[4] in (0, 1)
    ):
        return Member(entry[0], entry[1], entry[2], entry[3], bool(entry[4]))
    return None


def lost_pod_from_entry(entry: object) -> LostPod | None:
    """The :class:`LostPod` of one ``lost`` entry (``LostPod.entry()``); ``None`` when it is not valid.

    The one parser of the entry: the reader's testimony, the agent's verdicts in the store
    (``peer_watch``) and the pods' words (``diagnosis/agreed.py``) use it.
    """
    if (
        isinstance(entry, list)
        and len(entry) in (3, 4)
        and _count(entry[0]) is not None
        and isinstance(entry[1], str)
        and (entry[2] is None or _is_ns(entry[2]))
        and (len(entry) == 3 or isinstance(entry[3], str))
    ):
        return LostPod(entry[0], entry[1], entry[2], entry[3] if len(entry) == 4 else None)
    return None


def _valid_entries(value: object, parse: Callable[[object], T | None]) -> tuple[T, ...]:
    """The entries of a list field that ``parse`` accepts: an invalid entry is dropped, never the field."""
    if not isinstance(value, list):
        return ()
    return tuple(parsed for parsed in map(parse, value) if parsed is not None)


def _members(value: object) -> tuple[Member, ...]:
    return _valid_entries(value, member_from_entry)


def _lost(value: object) -> tuple[LostPod, ...]:
    return _valid_entries(value, lost_pod_from_entry)


def _is_ns(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) <= _MAX_ABS_NS
