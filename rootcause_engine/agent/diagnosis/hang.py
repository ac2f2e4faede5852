"""Name the rank that hung: alive at teardown, and never in the collective its peers timed out in. A
hung rank raises nothing, and the agent finally ends it like any victim. Its peers fail with
collective timeouts, which are victims' errors too. So this module weighs the evidence: the
collective a peer timed out in, and what each live worker answered the probe. A rank that never
entered that collective, or whose stacks show it outside ``torch.distributed``, is hung. Without a
stalled collective nothing is called hung. Pure: the inputs come from ``launch_record.WorkerRecord``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from rootcause_core.collectives import (
    CollectivePosition,
    entered,
    init_stall,
    is_collective_timeout,
    last_in_group,
    merged_stall,
    timed_out_in,
)
from rootcause_engine.agent.worker_probe import ProbeAnswer
from rootcause_engine.worker.progress_beacon import BEACON_INTERVAL_S
from rootcause_engine.worker.recorder import RecordedError

#: A silent worker whose beacon missed this many beats by the probe has stopped running.
SILENT_AFTER_BEATS = 2


@dataclasses.dataclass(frozen=True)
class HangVerdict:
    """Why one live worker is taken for the hung rank."""

    stalled: CollectivePosition
    last: CollectivePosition | None  # its own last collective in that group, if known
    stacks: str
    #: When it was last seen making progress: it entered its last collective then; else, the
    #: stalled collective's time (its peers were in it, it was not); else when it was probed.
    last_progress_ns: int

    named: bool = False  # its peers named it: they waited for its store key in the stalled initialisation
    #: A worker that answered nothing: its process state in words when probed (``T (stopped ...)``).
    silent_state: str = ""
    #: ... and it was inside the stalled collective by its last progress beat (stopped there).
    stopped_inside: bool = False

    def message(self) -> str:
        if self.silent_state:
            return self._silent_message()
        if self.named and self.stalled.is_point_to_point:
            where = "its peers waited for it there; its stacks show it outside any torch.distributed call"
        elif self.named:
            where = "its peers waited for its key in the rendezvous store"
        elif self.last is not None:
            where = f"its last was {self.last.describe()}"
        else:
            where = "no collective of its own was recorded; its stacks show it outside any torch.distributed call"
        stacks = (
            "Its Python stacks when probed are below: check the code they point to"
            if self.stacks
            else "It did not answer the agent's probe: check its logs for where it stopped"
        )
        return (
            f"hung: it never entered {self.stalled.describe()}, in which its peers timed out ({where}); "
            f"ended by the agent. {stacks} (a data loader, a deadlock, a GPU kernel that never returned)"
        )

    def _silent_message(self) -> str:
        where = f"its last was {self.last.describe()}, by its last progress beat" if self.last is not None else (
            "no collective of its own was recorded")
        how = (f"it stopped inside {self.stalled.describe()}, in which its peers timed out" if self.stopped_inside
               else f"it never entered {self.stalled.describe()}, in which its peers timed out ({where})")
        return (
            f"hung: {how}; process state {self.silent_state} when the agent probed it; ended by the agent. "
            "It did not answer the agent's probe (a stopped process answers nothing): check its logs and what "
            "stopped it (a debugger, a frozen container, SIGSTOP)"
        )

    def stacks_text(self) -> str:
        if not self.stacks:
            return ""
        return "Python stacks of every thread of the hung worker when the agent probed it:\n" + self.stacks


def stalled_collective(
    recorded: Iterable[RecordedError | None], announced: Iterable[CollectivePosition] = ()
) -> CollectivePosition | None:
    """The collective (or initialisation) peers timed out in: from this pod's timed-out workers, else
    a peer pod's announcement."""
    local = [
        position
        for error in recorded
        if error is not None and is_collective_timeout(error.message)
        if (position := _stall_of(error)) is not None
    ]
    return merged_stall([*local, *announced])


def _stall_of(error: RecordedError) -> CollectivePosition | None:
    """Where one timed-out worker was stuck: the default group's initialisation when its store wait
    names the peers it waited for, else its last collective."""
    return init_stall(error.message, error.timestamp_ns) or timed_out_in(error.collectives)


def hang_verdict(
    probe: ProbeAnswer | None, stalled: CollectivePosition | None, rank: int | None
) -> HangVerdict | None:
    """The verdict on worker ``rank`` (global), alive at teardown, or ``None`` when it did not hang."""
    if stalled is None:
        return None
    named = rank in stalled.awaited
    if probe is not None and probe.silent:
        return _silent_verdict(probe, stalled, rank, named)
    if not named and (probe is None or stalled.is_init or stalled.is_point_to_point):
        # a stalled initialisation or point-to-point call accuses only the ranks its peers named: another
        # rank outside torch.distributed may be waiting on purpose (a soft restart's paused worker waits
        # for its world), or not be the peer anyone waited for
        return None
    if stalled.is_point_to_point and (probe is None or probe.in_collective):
        return None  # a named peer waiting in a call of its own waits for its own peer (or never answered)
    collectives = (probe.collectives or ()) if probe is not None else ()
    known = entered(stalled, collectives, rank)
    in_collective = probe is not None and probe.in_collective
    if (in_collective if known is None else known):  # it was waiting in a collective, or entered it
        return None
    last = last_in_group(collectives, stalled.pg)
    candidates = (
        last.entered_ns if last is not None else None,
        stalled.entered_ns,
        probe.asked_ns if probe is not None else None,
    )
    progress = next((ns for ns in candidates if ns is not None), None)
    if progress is None:
        return None  # nothing says when it stopped: left a victim rather than stamped at an invented time
    return HangVerdict(
        stalled=stalled, last=last, stacks=probe.stacks if probe is not None else "", last_progress_ns=progress,
        named=named,
    )


def _silent_verdict(
    probe: ProbeAnswer, stalled: CollectivePosition, rank: int | None, named: bool
) -> HangVerdict | None:
    """The verdict on a live worker that answered nothing: hung when it is stopped, or when its beacon
    went silent long before the probe while its last beat showed it outside the stalled collective.
    A stopped worker is never a victim: it waits for no one, its peers wait for it."""
    beacon = probe.beacon
    collectives = (
        (*(group.position() for group in beacon.groups), *beacon.point_to_point) if beacon is not None else ()
    )
    known = entered(stalled, collectives, rank)
    silent_s = (probe.asked_ns - beacon.written_ns) / 1e9 if beacon is not None else None
    beacon_stopped = silent_s is not None and silent_s >= SILENT_AFTER_BEATS * BEACON_INTERVAL_S
    if not probe.stopped and not (beacon_stopped and known is not True):
        return None
    if not probe.stopped and stalled.is_point_to_point and not named:
        return None  # a point-to-point stall accuses only the peers it waited for
    last = last_in_group(collectives, stalled.pg)
    candidates = (
        last.entered_ns if last is not None else None,
        stalled.entered_ns,
        beacon.written_ns if beacon is not None else None,
        probe.asked_ns,
    )
    progress = next(ns for ns in candidates if ns is not None)
    return HangVerdict(
        stalled=stalled, last=last, stacks="", last_progress_ns=progress, named=named,
        silent_state=probe.state_words or probe.state or "unknown", stopped_inside=known is True,
    )
