"""Name the rank that hung: alive at teardown, and never in the collective its peers timed out in.

Why: a hung rank raises nothing and is finally ended by the agent like any victim, while its peers
fail with collective timeouts (victims' errors). The evidence that tells it apart:

- the *stalled collective*: the one a peer timed out in. A worker that failed with a timeout wrote
  its last collective per process group into its error file (Flight Recorder numbers); a peer pod
  that failed so announces it in the rendezvous store (``agent.peer_watch``);
- what each live worker answered when the agent probed it before the teardown
  (``agent.worker_probe``): its own last collectives, and its stacks.

A live worker whose last collective in that group has a lower number never entered it: hung. A
worker whose collectives are unknown (no Flight Recorder, or its Python could not answer) is judged
by its stacks: no thread inside a ``torch.distributed`` call means it was not waiting in any
collective while its peers timed out in one. Without a stalled collective nothing is called hung:
a rank busy in its own code while a peer *raised* is an ordinary victim.

A stall can also come before any collective: peers that timed out forming the default group name,
in their store-wait error, the rank whose key never came (``rootcause_core.store_waits``). That rank
is hung whatever its stacks show (it may be stuck in native code, or inside
``init_process_group`` before it published its key) and whether or not it answered the probe. No
other rank is judged by its stacks against such a stall: one outside ``torch.distributed`` may be
waiting on purpose (a soft restart's paused worker waits there for its next world).

A point-to-point call that timed out (a recv or send: the Flight Recorder numbers none under gloo)
names the peer it waited for (``rootcause_core.collectives.merged_stall``). A named rank is hung
when its stacks show it outside any ``torch.distributed`` call: in a ring of sends and receives a
named rank may itself be waiting for its own neighbour, and that one is a victim.

Pure: the inputs come from ``launch_record.WorkerRecord``.
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
from rootcause_engine.worker.recorder import RecordedError


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

    def message(self) -> str:
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
