"""The one diagnosis pipeline: a launch record, plus what the peers said, in; a diagnosis out. Several
roads lead to a report: a failed worker, a lost store, a hung agent, a soft restart. With steps of
their own, their reports would drift apart. So each road calls :func:`diagnose` once, naming its
:class:`Trigger`, and a new road is a new trigger, not a new pipeline. The result is a
:class:`Diagnosis`, plain data that a front-end turns into its own error. Nothing here imports a
front-end.
"""

from __future__ import annotations

import dataclasses
import enum
import socket
import time
from collections.abc import Mapping, Sequence
from typing import Protocol

from rootcause_core.collectives import CollectivePosition
from rootcause_core.ordering import Role, order_failures
from rootcause_core.roles import role_marker
from rootcause_core.testimony import LostPod, Member, describe_lost_pod
from rootcause_core.worker_names import current_worker_name
from rootcause_engine.agent.diagnosis.failures import WorkerFailure
from rootcause_engine.agent.diagnosis.hang import HangVerdict, stalled_collective
from rootcause_engine.agent.diagnosis.report import format_agent_timeline, format_root_cause_message
from rootcause_engine.agent.diagnosis.selection import RetryRule, is_recoverable, rank_failures
from rootcause_engine.agent.diagnosis.stalled_rank import with_verdicts_reached_early
from rootcause_engine.agent.launch_record import LaunchRecord


class Trigger(enum.Enum):
    """What started a diagnosis (the report and the Deck say it)."""

    WORKER_FAILED = "torch reported a failed worker"
    STORE_LOST = "the agent lost the rendezvous store"
    AGENT_HUNG = "the agent watchdog found the agent hung"
    POD_LOST = "a peer pod was lost (its processes ended without a word, or it fell silent: a frozen or cut-off node)"
    SOFT_RESTART = "a failure a soft restart may heal"
    STOPPED = "the pod was stopped by its kubelet (SIGTERM: preemption, drain, eviction or deletion)"
    HUNG_RANK = "a rank made no progress while its peers waited for it (before any collective timed out)"


class PeerFailures(Protocol):
    """This pod's word to the other pods on the failure path (``PeerWatch.failures`` answers)."""

    def announce(self, stalled: CollectivePosition | None = None) -> None: ...

    def stalls(self, wait_s: float = 0.0) -> tuple[CollectivePosition, ...]: ...

    def done(self) -> None: ...


class LostPodSearch(Protocol):
    """Which other pods are gone (``PeerWatch.lost_pods`` answers)."""

    def search(self) -> tuple[LostPod, ...]: ...


class PeerTestimony(Protocol):
    """What the pipeline asks of the other pods (``agent.peer_watch.PeerWatch`` answers)."""

    @property
    def failures(self) -> PeerFailures: ...

    @property
    def lost_pods(self) -> LostPodSearch: ...

    def watch_note(self) -> str | None: ...

    def members(self) -> tuple[Member, ...]: ...


#: How long a pod that saw only victims, with a worker alive outside any collective, waits for a peer
#: to announce the collective it timed out in (the peer's timeout can come after this pod's victims'
#: errors: gloo closes a pair that timed out). Ends early once every peer has announced its failure.
STALL_ANNOUNCEMENT_WAIT_S = 2.0


#: One soft-restart row for the Deck: (time ns, node, what happened, reason).
RestartRow = tuple[int, str, str, str]


@dataclasses.dataclass(frozen=True)
class Diagnosis:
    """The root cause of a failed launch and everything behind it.

    ``failures`` root cause first; empty only for a hung agent none of whose workers failed.
    ``report`` is the text people read (its first line names the root cause behind its role
    marker); ``members`` and ``lost_pods`` are what this pod testifies about the other pods;
    ``restarts`` the soft restarts the job went through before.
    """

    trigger: Trigger
    failures: tuple[WorkerFailure, ...]
    report: str
    recoverable: bool
    members: tuple[Member, ...] = ()
    lost_pods: tuple[LostPod, ...] = ()
    restarts: tuple[RestartRow, ...] = ()

    @property
    def root_cause(self) -> WorkerFailure | None:
        return self.failures[0] if self.failures else None

    @property
    def timestamp_ns(self) -> int | None:
        return None if self.root_cause is None else self.root_cause.timestamp_ns

    @property
    def summary(self) -> str:
        """The report's first line."""
        lines = self.report.strip().splitlines()
        return lines[0] if lines else self.trigger.value


def report_for(
    failures: Sequence[WorkerFailure],
    *,
    trigger: Trigger = Trigger.WORKER_FAILED,
    notes: Sequence[str] = (),
    members: Sequence[Member] = (),
    lost_pods: Sequence[LostPod] = (),
    restarts: Sequence[RestartRow] = (),
    retry_rule: RetryRule = RetryRule.ON_REQUEST,
) -> Diagnosis:
    """The diagnosis of ranked ``failures`` (root cause first; at least one).

    The first line, which readers parse, stays the root cause's; lost pods get a paragraph of
    their own, then each note in order.
    """
    if not failures:
        raise ValueError("a root-cause report needs at least one failure")
    message = format_root_cause_message(list(failures))
    if lost_pods:
        noticed = failures[0].timestamp_ns or time.time_ns()
        message += "\n\n" + "\n".join(describe_lost_pod(peer, noticed_ns=noticed) for peer in lost_pods)
    for note in notes:
        if note:
            message += "\n\n" + note
    return Diagnosis(
        trigger=trigger,
        failures=tuple(failures),
        report=message,
        recoverable=is_recoverable(failures, retry_rule),
        members=tuple(members),
        lost_pods=tuple(lost_pods),
        restarts=tuple(restarts),
    )


def agent_timeline(record: LaunchRecord, failures: Sequence[WorkerFailure]) -> str:
    """The report's line on when this pod's agent noticed, tore down and reported (``report.py``)."""
    root_ns = failures[0].timestamp_ns if failures else None
    return format_agent_timeline(root_ns, record.teardown_ns, record.teardown_done_ns, time.time_ns())


def diagnose(
    record: LaunchRecord,
    *,
    trigger: Trigger = Trigger.WORKER_FAILED,
    peers: PeerTestimony | None = None,
    notes: Sequence[str] = (),
    restarts: Sequence[RestartRow] = (),
    retry_rule: RetryRule = RetryRule.ON_REQUEST,
    pod_failures: Sequence[WorkerFailure] = (),
    hung: Mapping[int, HangVerdict] | None = None,
) -> Diagnosis | None:
    """The diagnosis of ``record``; ``None`` when no worker of the attempt failed.

    ``peers``: the other pods (hard restarts: announced to, asked about, left); ``None`` where the
    job goes on without this pod's word (a soft restart heals it). ``notes``: what the road adds to
    the report, after the root cause and before the agent's timeline. ``retry_rule``: the
    front-end's (whether the root cause allows a retry). ``pod_failures``: failures of the pod itself,
    not of a worker (the kubelet stopped it), ranked with the workers' by the same rule. ``hung``:
    the workers (by pid) the hang watch named while their peers waited (``agent.hang_watch``).
    """
    local_stall = stalled_collective(worker.recorded for worker in record.workers)
    if peers is not None:
        peers.failures.announce(local_stall)
    announced = peers.failures.stalls() if peers is not None else ()

    def ranked(stalls: tuple[CollectivePosition, ...]) -> list[WorkerFailure]:
        workers = rank_failures(
            record.workers,
            signals_ns=record.signals_ns,
            worker=current_worker_name(),
            host=socket.gethostname(),
            announced_stalls=stalls,
        )
        stacks = {worker.launched.pid: worker.probe.stacks for worker in record.workers if worker.probe is not None}
        workers = with_verdicts_reached_early(workers, hung or {}, stacks)
        return order_failures([*pod_failures, *workers]) if pod_failures else workers

    failures = ranked(announced)
    if not failures:
        return None
    if (
        peers is not None
        and failures[0].role == Role.VICTIM
        and local_stall is None
        and not announced
        and _a_live_worker_was_outside_torch_distributed(record)
    ):
        # Only victims here ("connection closed": a peer's timeout closed its sockets), and a worker
        # of this pod was alive outside any collective: the peer that timed out may announce where
        # after this pod noticed; with its stall that worker may be the hung rank.
        announced = peers.failures.stalls(wait_s=STALL_ANNOUNCEMENT_WAIT_S)
        if announced:
            failures = ranked(announced)
    lost = peers.lost_pods.search() if peers is not None and failures[0].role == Role.VICTIM else ()
    watch = peers.watch_note() if peers is not None else None
    if watch is not None:  # what happened to this pod's own watch: cut off, a failed look, a dead thread
        notes = [*notes, watch]
    members = peers.members() if peers is not None else ()
    if peers is not None:
        peers.failures.done()
    return report_for(
        failures,
        trigger=trigger,
        notes=[*notes, agent_timeline(record, failures)],
        members=members,
        lost_pods=lost,
        restarts=restarts,
        retry_rule=retry_rule,
    )


def _a_live_worker_was_outside_torch_distributed(record: LaunchRecord) -> bool:
    """Some worker answered the teardown's probe from outside any ``torch.distributed`` call."""
    return any(worker.probe is not None and not worker.probe.in_collective for worker in record.workers)


def agent_hung(note: str, *, peers: PeerTestimony | None = None, restarts: Sequence[RestartRow] = ()) -> Diagnosis:
    """The diagnosis of a hung agent none of whose workers failed: the hang itself is the root cause
    (recoverable: nothing in the user's code failed)."""
    members = peers.members() if peers is not None else ()
    if peers is not None:
        peers.failures.announce(None)
        peers.failures.done()
    return Diagnosis(
        trigger=Trigger.AGENT_HUNG,
        failures=(),
        report=f"{role_marker(Role.CANDIDATE)} {note}",
        recoverable=True,
        members=tuple(members),
        restarts=tuple(restarts),
    )
