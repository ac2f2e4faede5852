"""Name a hung rank while the job is still healthy: its peers wait for it, and it makes no progress.
:mod:`.hang` names a hung rank only once its peers' collective times out, after 10 minutes to an
hour. The same evidence exists long before that: which collective each rank entered, and whether its
process moves. So rank R is hung when a peer has waited long for something R has not entered, R made
no progress as long, and R waits for nobody itself. Every length of time is measured on a monotonic
clock, and no two nodes' clocks are compared. Pure: ``agent.hang_watch`` samples the processes and
reads the peers' waits.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rootcause_core.bounded_json import loads_bounded
from rootcause_core.collectives import CollectivePosition
from rootcause_core.ordering import order_failures
from rootcause_core.store_waits import DEFAULT_GROUP
from rootcause_core.timestamps import rfc3339_ns
from rootcause_engine.agent.diagnosis.failures import WorkerFailure
from rootcause_engine.agent.diagnosis.hang import HangVerdict
from rootcause_engine.agent.diagnosis.selection import as_hung
from rootcause_engine.agent.thread_wait import IO
from rootcause_engine.agent.worker_progress import Usage
from rootcause_engine.settings import DEFAULT_HANG_IDLE_CPU_FRACTION
from rootcause_engine.worker.progress_beacon import BeaconReading

#: The state letter of a thread that runs or waits for a core (``/proc/<pid>/stat``).
RUNNABLE = "R"
#: Waits published per pod at most, and read per pod at most (store values are hostile input).
MAX_WAITS = 64
#: The longest wait a pod may say it published (s: a year; anything longer is forged).
MAX_PUBLISHED_WAIT_S = 366 * 24 * 3600.0
_MAX_TEXT = 64 * 1024


@dataclasses.dataclass(frozen=True)
class ProgressRule:
    """What counts as progress between two looks at a process tree (measured with
    ``benchmarks/progress_noise.py``: ``docs/hung_ranks.md``).

    An idle worker still spends a little: its Python threads, torch's and gloo's, the beacon (0.16 to
    0.55 % of a core, asleep or waiting in a collective, on a 2-core machine with 0 to 48 busy
    processes beside it), and up to 32 KB per 2-s look of page writes (the beacon's file). A rank
    computing under 8 busy processes got 13 % of a core, under 48 only 1.45 %: so close to the idle
    rate that the CPU alone would see it stand still for 42 s at a time. Its main thread is
    runnable at every look, though (state ``R``: it waits for a core, not for an event), which no
    idle rank's is: a look that finds it so counts as progress too.
    """

    idle_cpu_fraction: float = DEFAULT_HANG_IDLE_CPU_FRACTION
    cpu_floor_s: float = 0.05
    idle_io_bytes_per_s: float = 64 * 1024
    io_floor_bytes: int = 1024 * 1024

    def moved(self, since: Usage, now: Usage, own_bytes: int) -> bool:
        """The tree spent more CPU or I/O from ``since`` to ``now`` than an idle one does
        (``own_bytes``: what the beacon wrote meanwhile, not the rank's doing), or its main thread
        is runnable now."""
        if now.state == RUNNABLE:
            return True
        elapsed = max(0.0, now.taken_s - since.taken_s)
        cpu = now.cpu_s - since.cpu_s
        io = now.io_bytes - since.io_bytes - own_bytes
        return (
            cpu > self.cpu_floor_s + self.idle_cpu_fraction * elapsed
            or io > self.io_floor_bytes + self.idle_io_bytes_per_s * elapsed
        )


@dataclasses.dataclass(frozen=True)
class ProgressTrack:
    """One worker's progress as the hang watch follows it: its last look that showed progress
    (``anchor``) and its latest look.

    A collective entered or completed is progress too (``position``: the beacon's
    :meth:`~rootcause_engine.worker.progress_beacon.BeaconReading.position`): a rank that waited ten
    minutes in a collective for a peer's evaluation spent next to no CPU meanwhile, and the moment
    its collective completes it is not still, though its CPU has not shown it yet.
    """

    anchor: Usage
    anchor_bytes: int  # the beacon's byte count at the anchor
    latest: Usage
    position: object = None  # where the rank stood at the anchor (``None``: unknown)

    @classmethod
    def start(cls, usage: Usage, beacon_bytes: int, position: object = None) -> ProgressTrack:
        return cls(usage, beacon_bytes, usage, position)

    @property
    def still_s(self) -> float:
        """How long it has made no progress (0 right after a look that showed some)."""
        return self.latest.taken_s - self.anchor.taken_s

    @property
    def still_since_ns(self) -> int:
        """When it was last seen making progress (wall clock)."""
        return self.anchor.taken_ns

    def advanced(
        self, usage: Usage, beacon_bytes: int, rule: ProgressRule, position: object = None
    ) -> ProgressTrack:
        """The track after one more look (``position``: where the rank stands now, ``None``: unknown)."""
        known = position if position is not None else self.position
        moved_on = position is not None and self.position is not None and position != self.position
        # a read or write the main thread was blocked in returned: the rank goes on (its counters may
        # not show it yet: one byte read, then straight into a collective)
        moved_on = moved_on or (self.latest.main_wait == IO and usage.main_wait != IO)
        if moved_on or rule.moved(self.anchor, usage, max(0, beacon_bytes - self.anchor_bytes)):
            return ProgressTrack(usage, beacon_bytes, usage, known)
        # a counter that went down (a child left the tree without the worker reaping it) moves the
        # baseline, never the time of the last progress
        anchor = dataclasses.replace(
            self.anchor, cpu_s=min(self.anchor.cpu_s, usage.cpu_s), io_bytes=min(self.anchor.io_bytes, usage.io_bytes)
        )
        return ProgressTrack(anchor, self.anchor_bytes, usage, known)


@dataclasses.dataclass(frozen=True)
class PeerWait:
    """A rank that waits: in collective ``position`` (its number and group), or in a blocking
    send/recv whose ``position.awaited`` is the peer; since ``position.entered_ns`` (its node's wall
    clock: for display). How long it has waited: :meth:`waited_s` (the module docstring's "Clocks")."""

    rank: int
    worker: str
    position: CollectivePosition
    #: how long it had lasted when its pod first published it, by that pod's monotonic clock (the
    #: store's ``waited_s``); ``None``: a local wait, or a publisher that did not say
    published_waited_s: float | None = None
    #: when it began on this host's monotonic clock: a local wait's from its beacon, a peer's from
    #: :attr:`published_waited_s` and when this pod first read it; ``None``: not known here
    since_mono_ns: int | None = None

    def waited_s(self, now_ns: int, now_mono_ns: int | None = None) -> float:
        """How long it has waited at ``now_mono_ns`` (this host's monotonic clock) when its start is
        known on that clock; else from its wall-clock start to ``now_ns`` (this node's wall clock:
        a step of either clock, or a skew between the nodes, adds to it)."""
        if self.since_mono_ns is not None and now_mono_ns is not None:
            return max(0, now_mono_ns - self.since_mono_ns) / 1e9
        since = self.position.entered_ns
        return 0.0 if since is None else (now_ns - since) / 1e9

    def identity(self) -> tuple[object, ...]:
        """Which wait it is, the same in every text its pod publishes while it lasts (a new wait in
        the same collective number, after a restart, has another start)."""
        position = self.position
        return (self.worker, self.rank, position.pg, position.seq, position.op, position.awaited, position.entered_ns)

    def to_json(self) -> dict[str, Any]:
        """What the store holds: the host's monotonic moment left out (meaningless on another node)."""
        position = dataclasses.replace(self.position, entered_mono_ns=None)
        value: dict[str, Any] = {"rank": self.rank, "worker": self.worker, "position": position.to_json()}
        if self.published_waited_s is not None:
            value["waited_s"] = self.published_waited_s
        return value

    @classmethod
    def from_json(cls, value: object) -> PeerWait | None:
        """A wait another pod published; ``None`` for anything malformed (a ``waited_s`` that is no
        finite number of seconds in ``[0, MAX_PUBLISHED_WAIT_S]`` included)."""
        if not isinstance(value, Mapping):
            return None
        rank, worker, waited = value.get("rank"), value.get("worker"), value.get("waited_s")
        position = CollectivePosition.from_json(value.get("position"))
        if not isinstance(rank, int) or isinstance(rank, bool) or rank < 0 or not isinstance(worker, str):
            return None
        if position is None or position.entered_ns is None:
            return None
        if waited is not None and not (
            isinstance(waited, (int, float)) and not isinstance(waited, bool)
            and math.isfinite(waited) and 0 <= waited <= MAX_PUBLISHED_WAIT_S
        ):
            return None
        return cls(rank, worker[:256], dataclasses.replace(position, entered_mono_ns=None),
                   None if waited is None else float(waited))


def waits_text(waits: Iterable[PeerWait]) -> str:
    """The store value of one pod's waits (at most :data:`MAX_WAITS`)."""
    return json.dumps([wait.to_json() for wait in list(waits)[:MAX_WAITS]])


def waits_from_text(value: bytes | str | None) -> tuple[PeerWait, ...]:
    """The waits a pod published; nothing for a value that is missing, too large or malformed."""
    if value is None:
        return ()
    try:
        items = loads_bounded(value, max_bytes=_MAX_TEXT)  # size and depth checked before parsing
    except (ValueError, UnicodeDecodeError):
        return ()
    if not isinstance(items, list):
        return ()
    return tuple(wait for item in items[:MAX_WAITS] if (wait := PeerWait.from_json(item)) is not None)


def waits_of(rank: int, worker: str, beacon: BeaconReading) -> list[PeerWait]:
    """What rank ``rank`` waits in, by its beacon: each open collective (once its beacon knows when it
    was entered) and each open blocking send or recv."""
    waits = [
        PeerWait(rank, worker, group.position(), since_mono_ns=group.since_mono_ns)
        for group in beacon.groups
        if group.pending and group.since_ns is not None
    ]
    waits.extend(PeerWait(rank, worker, call, since_mono_ns=call.entered_mono_ns)
                 for call in beacon.point_to_point if call.entered_ns is not None)
    return waits


@dataclasses.dataclass(frozen=True)
class NoProgressVerdict(HangVerdict):
    """A rank named hung while its peers still waited (no collective timed out yet)."""

    #: the peers' waits it held up, the longest first
    waits: tuple[PeerWait, ...] = ()
    still_s: float = 0.0
    waited_s: float = 0.0
    state: str = ""
    #: the peer its own open send/recv waits for, when that peer waits for it (a cycle)
    waits_for: int | None = None

    def summary(self) -> str:
        """One line for the agent's log, before the probe: how long it stood still, and who waited where."""
        return (
            f"made no progress for {self.still_s:.0f} s while {len(self.waits)} peer wait(s) held for "
            f"{self.waited_s:.0f} s in {self.stalled.describe()}"
        )

    def message(self) -> str:
        first = self.waits[0] if self.waits else None
        others = f", and {len(self.waits) - 1} more" if len(self.waits) > 1 else ""
        who = (
            f"rank {first.rank} on {first.worker} since {rfc3339_ns(first.position.entered_ns)}{others}"
            if first is not None and first.position.entered_ns is not None
            else "its peers"
        )
        if self.stalled.is_point_to_point:
            own = "it was in no torch.distributed call"
        else:
            own = f"its last there was {self.last.describe()}" if self.last is not None else "it entered none there"
        if self.waits_for is not None:
            own += f"; its own open send/recv waits for rank {self.waits_for}, which waits for it"
        stacks = (
            "Its Python stacks when probed are below: check the code they point to"
            if self.stacks
            else "It did not answer the agent's probe: check its logs for where it stopped"
        )
        state = f"; process state {self.state}" if self.state else ""
        return (
            f"hung: it made no progress for {self.still_s:.0f} s (no CPU time, no I/O{state}) while its peers "
            f"waited for it for {self.waited_s:.0f} s in {self.stalled.describe()} ({who}); {own}; ended by the "
            f"agent before any collective timed out. {stacks} (a data loader, a deadlock, a GPU kernel that never "
            "returned)"
        )


def _holds_up(wait: PeerWait, rank: int, beacon: BeaconReading) -> bool:
    """``wait`` waits for ``rank``: a send/recv naming it, or a collective of a group it is a member of
    (it has a status there) and has not entered."""
    position = wait.position
    if position.is_point_to_point:
        return rank in position.awaited
    group = beacon.group(position.pg)
    if group is None:
        # no status there in its last beacon: every rank is a member of the default group, so it has
        # entered none of that group's collectives since (a rank stopped before its beacon's first
        # beat after the group formed); another group may not include it
        return position.pg == DEFAULT_GROUP and position.seq > 0
    return group.entered < position.seq


def still_limit_s(track: ProgressTrack, after_s: float, io_wait_after_s: float | None = None) -> float:
    """How long the rank of ``track`` must make no progress to be judged: ``after_s``, or, while its main
    thread waits in a read or write (``io``), the longer of ``after_s`` and ``io_wait_after_s``."""
    if io_wait_after_s is not None and track.latest.main_wait == IO:
        return max(after_s, io_wait_after_s)
    return after_s


def stalled_rank_verdict(
    rank: int,
    beacon: BeaconReading | None,
    track: ProgressTrack,
    waits: Sequence[PeerWait],
    *,
    after_s: float,
    now_ns: int,
    io_wait_after_s: float | None = None,
    now_mono_ns: int | None = None,
) -> NoProgressVerdict | None:
    """The verdict on local rank ``rank`` (global), or ``None`` (the module docstring's rule);
    ``waits``: every rank's waits known now, this pod's and the peers'; ``io_wait_after_s``: the limit
    of a rank whose main thread waits in a read or write (:func:`still_limit_s`); ``now_mono_ns`` and
    ``now_ns``: now on this host's monotonic and wall clocks (:meth:`PeerWait.waited_s`)."""
    if beacon is None or track.still_s < still_limit_s(track, after_s, io_wait_after_s):
        return None
    if any(group.pending for group in beacon.groups):
        return None  # it waits in a collective it entered: for someone else
    waited = {id(w): w.waited_s(now_ns, now_mono_ns) for w in waits}
    held = sorted(
        (w for w in waits if w.rank != rank and waited[id(w)] >= after_s and _holds_up(w, rank, beacon)),
        key=lambda w: (-waited[id(w)], w.rank),
    )
    if not held:
        return None
    waits_for = None
    if beacon.point_to_point:  # waiting itself: hung only in a cycle with a rank that waits for it
        awaited = {peer for call in beacon.point_to_point for peer in call.awaited}
        cycle = sorted(awaited & {w.rank for w in held})
        if not cycle:
            return None
        waits_for = cycle[0]
    stalled = held[0].position
    last = None if stalled.is_point_to_point else (group.position() if (group := beacon.group(stalled.pg)) else None)
    if last is not None and last.seq <= 0:
        last = None
    return NoProgressVerdict(
        stalled=stalled,
        last=last,
        stacks="",
        last_progress_ns=track.still_since_ns,
        waits=tuple(held),
        still_s=track.still_s,
        waited_s=waited[id(held[0])],
        state=track.latest.describe_state(),
        waits_for=waits_for,
    )


def with_verdicts_reached_early(
    failures: Sequence[WorkerFailure], verdicts: Mapping[int, HangVerdict], stacks: Mapping[int, str]
) -> list[WorkerFailure]:
    """``failures`` (ranked) with each worker the hang watch named (by pid) made the hung root cause,
    with its stacks from the teardown's probe (``stacks``, by pid); ranked again."""
    if not verdicts:
        return list(failures)
    named = [
        as_hung(failure, dataclasses.replace(verdict, stacks=stacks.get(failure.pid, "")))
        if failure.pid is not None and (verdict := verdicts.get(failure.pid)) is not None
        else failure
        for failure in failures
    ]
    return order_failures(named)
