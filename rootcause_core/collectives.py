"""Where a rank stood in its collectives, and the rule that names a hung rank from it.

A rank that stops making progress raises nothing. Its peers go on without it, time out, and fail
with victims' errors. The hung rank is the one that never *entered* the collective its peers timed
out in. torch's Flight Recorder gives each collective of a group the same number on every rank. So
comparing the last number each rank reached finds it, as torch's own ``fr_trace`` does for NCCL.
A stalled initialisation and an open send or recv are positions too: each names the peer it waited
for. :class:`CollectivePosition` is one rank's last position in one group. ``docs/messages.md`` has
the details.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from rootcause_core.roles import is_victim_message
from rootcause_core.store_waits import DEFAULT_GROUP, read_store_wait

#: Lower-case fragments of a collective that ran out of time (gloo: "Timed out waiting 3000ms for
#: recv operation to complete"; NCCL watchdog: "Watchdog caught collective operation timeout").
TIMEOUT_PATTERNS: tuple[str, ...] = ("timed out", "timeout")
#: The operation of a stalled group initialisation (:func:`init_stall`).
INIT_OP = "init_process_group"
#: The operations of point-to-point positions (the blocking calls a worker records: isend and irecv are not).
POINT_TO_POINT_OPS: tuple[str, ...] = ("send", "recv")
#: The latest monotonic reading a file may hold (ns: an int64, as the kernel's clock counts).
MAX_MONO_NS = 2**63 - 1
#: Awaited ranks kept from one entry at most (entries cross the store and error files: hostile input).
_MAX_AWAITED = 64


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_mono_ns(value: object) -> bool:
    """``value`` is a reading of ``time.monotonic_ns()``: an int (JSON's ASCII digits, no bool) in
    ``[0, 2**63 - 1]``, so that no difference of two overflows what the agent computes with."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_MONO_NS


@dataclasses.dataclass(frozen=True, order=True)
class CollectivePosition:
    """The last collective a rank entered in process group ``pg``: its sequence number and name."""

    pg: str
    seq: int
    op: str = ""
    #: when it was entered, on the wall clock of the rank's node: for display, and to order one rank's
    #: positions; never to time a wait (a step of that clock, NTP's or a resumed VM's, would move it)
    entered_ns: int | None = None
    #: A stalled initialisation only: the ranks whose store keys the peers waited for in vain.
    awaited: tuple[int, ...] = ()
    #: the same moment on the monotonic clock of the rank's node (``time.monotonic_ns()``, shared by
    #: every process of a Linux host, never stepped): what the agent of that node times a wait with.
    #: Meaningless on another node; not part of which position it is (not compared).
    entered_mono_ns: int | None = dataclasses.field(default=None, compare=False)

    @property
    def is_init(self) -> bool:
        """The group's initialisation, not one of its collectives."""
        return self.op == INIT_OP

    @property
    def is_point_to_point(self) -> bool:
        """A send or recv to one peer (``awaited``), not a collective of the whole group."""
        return self.op in POINT_TO_POINT_OPS

    def to_json(self) -> dict[str, Any]:
        value = dataclasses.asdict(self)
        value["awaited"] = list(self.awaited)
        if self.entered_mono_ns is None:
            del value["entered_mono_ns"]  # what every writer before it wrote
        return value

    @classmethod
    def from_json(cls, value: object) -> CollectivePosition | None:
        """Parse one entry written by :meth:`to_json`; ``None`` for anything malformed."""
        if not isinstance(value, Mapping):
            return None
        pg, seq, op, entered = value.get("pg"), value.get("seq"), value.get("op", ""), value.get("entered_ns")
        if not isinstance(pg, str) or not isinstance(op, str) or not _is_int(seq) or seq < 0:
            return None
        if entered is not None and not _is_int(entered):
            return None
        mono = value.get("entered_mono_ns")
        if mono is not None and not is_mono_ns(mono):
            return None
        awaited = value.get("awaited", [])
        if not isinstance(awaited, list) or not all(_is_int(rank) and rank >= 0 for rank in awaited):
            return None
        return cls(pg=pg[:64], seq=seq, op=op[:64], entered_ns=entered, awaited=tuple(awaited[:_MAX_AWAITED]),
                   entered_mono_ns=mono)

    def describe(self) -> str:
        """``all_reduce #4 of process group 0`` (the backend prefix of torch's name dropped), or
        ``the initialisation of process group 0`` for a stalled initialisation."""
        if self.is_init:
            return f"the initialisation of process group {self.pg}"
        if self.is_point_to_point:
            peers = ", ".join(str(rank) for rank in self.awaited) or "an unknown peer"
            return f"a point-to-point {self.op} with rank {peers} in process group {self.pg}"
        name = self.op.split(":", 1)[-1] or "collective"
        return f"{name} #{self.seq} of process group {self.pg}"


def init_stall(message: str, failed_ns: int | None) -> CollectivePosition | None:
    """The default group's initialisation as a stalled position, when ``message`` is a peer's store
    wait that timed out there (``store_waits``); entered when the wait began (its failure time less
    the wait), if that time is known."""
    wait = read_store_wait(message)
    if wait is None:
        return None
    began = failed_ns - wait.waited_ms * 1_000_000 if failed_ns is not None else None
    return CollectivePosition(
        DEFAULT_GROUP, 0, INIT_OP, began if began is not None and began >= 0 else None, wait.awaited
    )


def positions_from_entries(entries: Iterable[Mapping[str, Any]]) -> list[CollectivePosition]:
    """The last collective entered per process group, from Flight Recorder entries (any order)."""
    last: dict[str, CollectivePosition] = {}
    for entry in entries:
        seq = entry.get("collective_seq_id")
        if not _is_int(seq):
            continue
        created = entry.get("time_created_ns")
        position = CollectivePosition(
            pg=str(entry.get("pg_id", "")),
            seq=seq,
            op=str(entry.get("profiling_name") or ""),
            entered_ns=created if _is_int(created) else None,
        )
        if position.pg not in last or position.seq >= last[position.pg].seq:
            last[position.pg] = position
    return sorted(last.values())


def positions_from_json(values: object) -> list[CollectivePosition]:
    """Parse a list written with :meth:`CollectivePosition.to_json`, dropping malformed entries."""
    if not isinstance(values, list):
        return []
    return [position for value in values if (position := CollectivePosition.from_json(value)) is not None]


def is_timeout_message(message: str) -> bool:
    """True when a (victim's) error text says a collective or its transport ran out of time."""
    lowered = message.lower()
    return any(pattern in lowered for pattern in TIMEOUT_PATTERNS)


def is_collective_timeout(message: str) -> bool:
    """A collective that timed out waiting for a peer (gloo's transport timeout, NCCL's watchdog):
    a victim's timeout, not a user's own ``TimeoutError``."""
    return is_timeout_message(message) and is_victim_message(message)


def timed_out_in(positions: Iterable[CollectivePosition]) -> CollectivePosition | None:
    """The collective a rank that failed with a timeout was waiting in: its latest entered one."""
    return max(positions, key=lambda position: (position.entered_ns or 0, position.seq), default=None)


def merged_stall(stalls: Iterable[CollectivePosition]) -> CollectivePosition | None:
    """The stall peers timed out in (:func:`timed_out_in` of each rank's own stall). When that is a
    point-to-point call, the peers every point-to-point stall waited for are joined into its
    ``awaited``: in a ring of sends and receives the neighbours of the hung rank time out first, and
    the ranks further along time out waiting for those neighbours, so no single stall names the hung
    rank, while together they name it and ranks that were still waiting themselves (which the
    caller tells apart by their stacks)."""
    stalls = list(stalls)
    latest = timed_out_in(stalls)
    if latest is None or not latest.is_point_to_point:
        return latest
    awaited = sorted({rank for stall in stalls if stall.is_point_to_point for rank in stall.awaited})
    return dataclasses.replace(latest, awaited=tuple(awaited[:_MAX_AWAITED]))


def last_in_group(positions: Iterable[CollectivePosition], pg: str) -> CollectivePosition | None:
    """A rank's last collective in process group ``pg`` (point-to-point calls aside); ``None`` when
    it has none there."""
    return max(
        (position for position in positions if position.pg == pg and not position.is_point_to_point),
        key=lambda p: p.seq,
        default=None,
    )


def entered(
    stalled: CollectivePosition, positions: Iterable[CollectivePosition], rank: int | None = None
) -> bool | None:
    """Whether the rank ``rank`` whose ``positions`` these are entered ``stalled``: ``False`` when
    its peers waited for it in the stalled initialisation, or when its last collective in that
    group has a lower number; ``None`` when it has none in that group (not a member, or no Flight
    Recorder: the caller must look elsewhere, e.g. at its stack). A rank with any collective in the
    group got past its initialisation (number 0). A point-to-point stall is entered by no rank but
    the ones it waited for, and tells nothing of the others (``None``)."""
    if rank is not None and rank in stalled.awaited:
        return False
    if stalled.is_point_to_point:
        return None
    last = last_in_group(positions, stalled.pg)
    return None if last is None else last.seq >= stalled.seq
