"""The verdicts of one round that name a pod lost, each through the isolation gate.

Why one class: a pod is named lost on several roads (the healthy job's watch of its successor, a
store that stopped answering, the failure path's search, another pod's verdict read from the
ledger), and every one of them must pass the same gate (:mod:`.isolation_gate`): a pod cut off from
the others must name nobody, and a lost link between two live pods names both, marked so. This
class holds the gate, its witnesses, the verdicts reached so far and the callback told of them.
:class:`CurrentRoundLostPods` is how the agent asks the round that is current when it calls.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable

from rootcause_core.liveness import ISOLATION_WITNESSES
from rootcause_core.testimony import LostPod
from rootcause_core.timestamps import rfc3339_ns
from rootcause_engine.agent.isolation_gate import IsolationGate, Suspect
from rootcause_engine.agent.peer_link import LinkEndpoint
from rootcause_engine.agent.peer_round import PeerRound
from rootcause_engine.agent.round_ledger import FAILED

logger = logging.getLogger(__name__)


class LostVerdicts:
    """The lost-pod verdicts of one round (see the module docstring).

    ``witnesses``: whether the peers' link endpoints serve as the gate's witnesses (the watch holds
    links); ``told``: called with every verdict so far each time new ones are recorded; ``lock``
    guards the verdicts against the readers on other threads."""

    def __init__(self, peer_round: PeerRound, gate: IsolationGate, *, witnesses: bool,
                 told: Callable[[tuple[LostPod, ...]], None], lock: threading.Lock) -> None:
        self._round = peer_round
        self._gate = gate
        self._use_witnesses = witnesses
        self._told = told
        self._lock = lock
        self._verdicts: dict[int, LostPod] = {}  # peers declared lost while the job was healthy
        self._lost: set[int] = set()  # group ranks found lost (never waited for again)
        self._seen = 0  # how much of the ledger's history verdicts were taken from
        #: the gate's witnesses: the link endpoints of the few peers after this pod, taken from
        #: their ``join`` while the store answers (a cut-off pod cannot read them then)
        self._witnesses: dict[int, LinkEndpoint] = {}
        #: when this pod found itself cut off from the others (its own clock), if it did, and why
        self._cut_off_ns: int | None = None
        self._cut_off_reason = ""

    @property
    def lost(self) -> frozenset[int]:
        """The group ranks found lost on any road (never waited for again)."""
        return frozenset(self._lost)

    def declared(self) -> tuple[LostPod, ...]:
        """The peers declared lost while the job was healthy, in rank order."""
        with self._lock:
            return _in_rank_order(self._verdicts)

    def is_declared(self, rank: int) -> bool:
        return rank in self._verdicts

    def learn_witnesses(self) -> None:
        """Take, from their ``join``, where the peers after this pod listen (:data:`ISOLATION_WITNESSES`
        of them and the successor): the witnesses this pod probes before it declares anyone lost. A
        peer that published no endpoint is no witness."""
        if not self._use_witnesses:
            return
        own, world = self._round.rank, self._round.world_size
        wanted = [(own + step) % world for step in range(1, min(world, ISOLATION_WITNESSES + 2))]
        if all(rank in self._witnesses for rank in wanted):
            return
        joined = self._round.ledger.joined()
        for rank in wanted:
            link = joined[rank].link if rank in joined else None
            if link is not None:
                self._witnesses[rank] = link

    def accuse(self, accused: dict[int, LostPod], *, publish: bool, block: bool = False) -> dict[int, LostPod] | None:
        """The accused the isolation gate lets this pod name, those of whom only the link with this
        pod was lost marked so (``link_with``); nothing when this pod is the one cut off; ``None``
        while the gate awaits a third party's word (unless ``block``). With ``publish``, the
        verdicts on lost pods are appended to the round's ledger, for every pod (a failed append:
        this pod acts on them all the same); a lost link concerns this pod alone."""
        if not accused:
            return {}
        peer_round = self._round
        joined = peer_round.ledger.joined()
        suspects = {rank: Suspect(peer.worker, joined[rank].contact if rank in joined else None)
                    for rank, peer in accused.items()}
        witnesses = [endpoint for rank, endpoint in sorted(self._witnesses.items())
                     if rank not in accused and rank not in self._verdicts and rank != peer_round.rank]
        answer = self._gate.judge(suspects, witnesses[:ISOLATION_WITNESSES], block=block)
        if answer.pending:
            return None
        if answer.cut_off is not None:
            if self._cut_off_ns is None:
                self._cut_off_ns = time.time_ns()
                logger.error("peer watch: %s", answer.cut_off)
            self._cut_off_reason = answer.cut_off
            return {}
        found = {rank: peer for rank, peer in accused.items() if rank in answer.lost}
        if publish:
            for peer in found.values():
                peer_round.answered(lambda peer=peer: peer_round.ledger.lost(peer))
        for rank in answer.links:
            found[rank] = dataclasses.replace(accused[rank], link_with=peer_round.own.worker)
            logger.error("peer watch: only the network link between this pod and %s (group rank %d) was lost: both "
                         "live and reach as much; both are named", accused[rank].worker, rank)
        return found

    def record(self, found: dict[int, LostPod]) -> None:
        """Keep the verdicts ``found`` and tell the callback every verdict so far."""
        if not found:
            return
        with self._lock:
            self._verdicts.update(found)
            self._lost |= set(found)
        self._told(_in_rank_order(self._verdicts))

    def take_published(self) -> None:
        """Take the verdicts other pods appended to the ledger since the last look (read at this
        beat's refresh)."""
        verdicts, self._seen = self._round.ledger.verdicts(self._seen)
        members = self._round.members
        self.record({
            peer.group_rank: dataclasses.replace(peer, worker=members.member(peer.group_rank).worker)
            for peer in verdicts
            if peer.group_rank != self._round.rank and peer.group_rank not in self._verdicts
        })

    def store_host_lost(self) -> bool:
        """The store has not answered for the silence limit: the pod that hosts it is lost. Whether
        the gate cleared it (the silence is then counted again from now)."""
        peer_round = self._round
        members = peer_round.members
        accused = {
            member.group_rank: LostPod(member.group_rank, member.worker, peer_round.store_answered_ns)
            for member in members.known()
            if member.hosts_store and member.group_rank != peer_round.rank and member.group_rank not in self._verdicts
        }
        found = self.accuse(accused, publish=False)  # the store is gone: nowhere to publish
        if found is None:
            return False  # the gate awaits a third party: looked at again at the next beat
        if accused and not found:
            return True
        if found:
            logger.error("peer watch: the rendezvous store stopped answering: its host %s is lost",
                         ", ".join(peer.worker for peer in found.values()))
        self.record(found)
        return False

    def search(self, *, failure_look_s: float, interval_s: float) -> tuple[LostPod, ...]:
        """The failure path's question: the peers that are gone, with no heartbeat and no failure
        announced within ``failure_look_s`` (the verdicts of the healthy job, if any, stand)."""
        peer_round = self._round
        if self._verdicts:  # reached while the job was healthy: nothing left to watch for
            self._lost |= set(self._verdicts)
            return _in_rank_order(self._verdicts)
        pending = peer_round.others()
        baseline: dict[int, int | None] = {}
        store_gone = False
        for rank in sorted(pending):
            beat, ok = peer_round.last_beat(rank)
            if not ok:
                store_gone = True
                break
            baseline[rank] = beat
        deadline = time.monotonic() + failure_look_s
        judged: dict[int, LostPod] = {}  # verdicts other pods reached meanwhile (a link that closed)
        seen = 0  # this search's own place in the ledger's verdicts
        while pending and not store_gone:
            if not peer_round.refresh():
                store_gone = True
                break
            verdicts, seen = peer_round.ledger.verdicts(seen)
            for peer in verdicts:
                if peer.group_rank in pending:
                    pending.discard(peer.group_rank)
                    judged[peer.group_rank] = peer
            pending -= peer_round.ledger.ranks(FAILED)
            for rank in sorted(pending):
                beat, ok = peer_round.last_beat(rank)
                if not ok:
                    store_gone = True
                    break
                if beat != baseline.get(rank):
                    pending.discard(rank)
            if not pending or store_gone or time.monotonic() >= deadline:
                break
            time.sleep(min(interval_s / 2, max(0.0, deadline - time.monotonic())))
        members = peer_round.members
        if store_gone:
            pending = {rank for rank in pending if members.member(rank).hosts_store}
        # the store's host is named on this pod's own word; its clock: while its store answered
        last_seen = {rank: peer_round.store_answered_ns if store_gone else baseline.get(rank) for rank in pending}
        found = self.accuse({
            rank: LostPod(rank, members.member(rank).worker, last_seen[rank]) for rank in pending
        }, publish=False, block=True) or {}
        self._lost |= set(found) | set(judged)
        found.update(
            (rank, dataclasses.replace(peer, worker=members.member(rank).worker,
                                       last_seen_ns=peer.last_seen_ns or baseline.get(rank)))
            for rank, peer in judged.items()
        )
        return _in_rank_order(found)

    def cut_off_note(self) -> str | None:
        """For the report: when this pod found itself cut off from its peers, and what it saw."""
        if self._cut_off_ns is None:
            return None
        return f"This pod was cut off from its peers at {rfc3339_ns(self._cut_off_ns)}: {self._cut_off_reason}."


class CurrentRoundLostPods:
    """The lost pods of whichever round is current when asked (``PeerWatch.lost_pods``).

    ``current``: the current round's verdicts, ``None`` before the first round (every question then
    answers none); ``failure_look_s`` and ``interval_s``: the watch's, which pace the failure path's search."""

    def __init__(self, current: Callable[[], LostVerdicts | None], *, failure_look_s: float, interval_s: float) -> None:
        self._current = current
        self._failure_look_s = failure_look_s
        self._interval_s = interval_s

    def declared(self) -> tuple[LostPod, ...]:
        """The peers declared lost in the current round while the job was healthy (no failure yet)."""
        verdicts = self._current()
        return () if verdicts is None else verdicts.declared()

    def search(self) -> tuple[LostPod, ...]:
        """The failure path's question: the peers that are gone, with no heartbeat and no failure
        announced within ``failure_look_s`` (:meth:`LostVerdicts.search`)."""
        verdicts = self._current()
        if verdicts is None:
            return ()
        return verdicts.search(failure_look_s=self._failure_look_s, interval_s=self._interval_s)


def _in_rank_order(verdicts: dict[int, LostPod]) -> tuple[LostPod, ...]:
    return tuple(verdicts[rank] for rank in sorted(verdicts))
