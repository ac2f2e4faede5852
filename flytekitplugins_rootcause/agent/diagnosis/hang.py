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

Pure: the inputs come from ``selection.WorkerEvidence``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from flytekitplugins_rootcause.agent.worker_probe import ProbeAnswer
from flytekitplugins_rootcause.worker.recorder import RecordedError
from rootcause_core.collectives import (
    CollectivePosition,
    entered,
    is_collective_timeout,
    last_in_group,
    timed_out_in,
)


@dataclasses.dataclass(frozen=True)
class HangVerdict:
    """Why one live worker is taken for the hung rank."""

    stalled: CollectivePosition
    last: CollectivePosition | None  # its own last collective in that group, if known
    stacks: str
    #: When it was last seen making progress: it entered its last collective then; else, the
    #: stalled collective's time (its peers were in it, it was not); else when it was probed.
    last_progress_ns: int

    def message(self) -> str:
        where = (
            f"its last was {self.last.describe()}"
            if self.last is not None
            else "no collective of its own was recorded; its stacks show it outside any torch.distributed call"
        )
        return (
            f"hung: it never entered {self.stalled.describe()}, in which its peers timed out ({where}); "
            "ended by the agent. Its Python stacks when probed are below: check the code they point to "
            "(a data loader, a deadlock, a GPU kernel that never returned)"
        )

    def stacks_text(self) -> str:
        return "Python stacks of every thread of the hung worker when the agent probed it:\n" + self.stacks


def stalled_collective(
    recorded: Iterable[RecordedError | None], announced: Iterable[CollectivePosition] = ()
) -> CollectivePosition | None:
    """The collective peers timed out in: from this pod's timed-out workers, else a peer pod's announcement."""
    local = [
        position
        for error in recorded
        if error is not None and is_collective_timeout(error.message)
        if (position := timed_out_in(error.collectives)) is not None
    ]
    return timed_out_in([*local, *announced])


def hang_verdict(probe: ProbeAnswer | None, stalled: CollectivePosition | None) -> HangVerdict | None:
    """The verdict on one worker that was alive at teardown, or ``None`` when it did not hang."""
    if probe is None or stalled is None:
        return None
    known = entered(stalled, probe.collectives or ())
    if (probe.in_collective if known is None else known):  # it was waiting in a collective, or entered it
        return None
    last = last_in_group(probe.collectives or (), stalled.pg)
    candidates = (last.entered_ns if last is not None else None, stalled.entered_ns, probe.asked_ns)
    progress = next(ns for ns in candidates if ns is not None)
    return HangVerdict(stalled=stalled, last=last, stacks=probe.stacks, last_progress_ns=progress)
