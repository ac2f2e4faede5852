"""Agent side: who the other pods of the attempt are, and which of them are gone when ours fail.

Why: a pod that vanishes (a lost node, a preempted VM, an evicted pod) writes no error file, and a
frozen or partitioned one closes no socket, so nothing fails until a collective times out, 10 to 30
minutes later; its peers' workers then fail as victims and, without more, every report names a
victim or nothing. The peers are the only witnesses left. So each agent joins the round's ledger
(:mod:`.round_ledger`), beats in the round's store, watches one successor's heartbeat and link
(:mod:`.peer_link`), announces its own failure before it diagnoses, and names a silent peer lost
only through the isolation gate (:mod:`.isolation_gate`). How, with its costs and margins:
``docs/frozen_pods.md``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from torch.distributed import PrefixStore, TCPStore

from rootcause_core.collectives import CollectivePosition
from rootcause_core.liveness import HEARTBEAT_INTERVAL_S, ISOLATION_WITNESSES, SILENCE_LIMIT_S
from rootcause_core.testimony import LostPeer, Member
from rootcause_core.timestamps import rfc3339_ns
from rootcause_engine.agent.bounded_store import STORE_ERRORS, BoundedStore
from rootcause_engine.agent.isolation_gate import ContactBoard, IsolationGate, Suspect, api_endpoint
from rootcause_engine.agent.peer_link import LinkEndpoint, PeerLink, answers, hub_note, link_hub
from rootcause_engine.agent.round_ledger import RoundLedger
from rootcause_engine.agent.store_values import StoreCall, time_value
from rootcause_engine.store_layout import alive_key
from rootcause_engine.thread_guard import LoopGuard, start_guarded
from rootcause_engine.upstream.torch_elastic import JoinedRound

logger = logging.getLogger(__name__)
T = TypeVar("T")

#: How long a peer may go without a heartbeat (and without announcing a failure) after this pod's
#: workers failed before it counts as lost: several heartbeats, so a busy host's late beat is not
#: taken for a lost pod.
LOST_AFTER_S = 2.0
#: How often the heartbeat thread looks for the store host's entry until it has it (the host may be
#: lost within a heartbeat of the rendezvous, and only a pod that read its entry can name it then).
#: The other members are looked for once per heartbeat.
MEMBERS_POLL_S = 0.05
#: How many heartbeats a peer whose link closed must miss before it is declared lost. Its beat
#: moves every heartbeat while its agent lives; a beat already on its way when the process ended
#: may still land once after the close, so the silence is counted from the last beat seen.
LINK_CONFIRM_BEATS = 2
#: How many beats seen after a link closed prove the peer lives (one may be a last beat in flight).
_BEATS_PROVING_LIFE = 2


@dataclasses.dataclass(frozen=True)
class RoundStore:
    """A rendezvous round's store as the peer watch holds it, and this pod's group rank, the pod count
    and whether this pod's agent hosts the store. ``call(operation, *args)`` runs one store operation
    within the watch's time bound, after any the watch has in flight (it raises what the store raises,
    or ``StoreUnresponsive``)."""

    call: Callable[..., Any]
    group_rank: int
    world_size: int
    hosts_store: bool
    ledger: RoundLedger


class _Round:
    """One rendezvous round's store and what this agent learned in it."""

    def __init__(self, joined: JoinedRound, own: Member, store: BoundedStore,
                 call: Callable[[_Round], StoreCall], gate: IsolationGate) -> None:
        self.store: Any = store
        self.world_size = joined.group_world_size
        self.own = own
        self.members: dict[int, Member] = {own.group_rank: own}
        self.stop = threading.Event()
        self.wake = threading.Event()  # the heartbeat thread's sleep ends early (stopped, a link closed)
        self.store_answered_ns: int | None = None  # the store's host was alive then (this pod's clock)
        self.lost: set[int] = set()  # group ranks this agent found lost (never waited for again)
        self.verdicts: dict[int, LostPeer] = {}  # peers declared lost while the job was healthy
        #: the round's ledger (every store call through the watch's own), and how much of its
        #: history the heartbeat thread has taken verdicts from
        self.ledger = RoundLedger(call(self), self.world_size, own.group_rank)
        self.verdicts_seen = 0
        # the watched successor: its group rank, its last heartbeat (ns), when that last changed
        self.watched: int | None = None
        self.watched_beat: int | None = None
        self.watched_since = time.monotonic()
        self.told_peer_failure = False  # the agent was told a peer failed (once per round)
        self.link: PeerLink | None = None  # this pod's connection to the watched successor's agent
        self.link_closed_at: float | None = None  # when this pod saw that connection close
        self.beats_after_close = 0  # new heartbeats of the watched peer seen since then
        self.store_silent_since: float | None = None  # the store stopped answering then
        self.store_host_known = own.hosts_store
        #: the isolation rule's witnesses: the link endpoints of the few peers after this pod, taken
        #: from their ``join`` while the store answers (a cut-off pod cannot read them then)
        self.witnesses: dict[int, LinkEndpoint] = {}
        #: the isolation gate every verdict of this round passes (:mod:`.isolation_gate`)
        self.gate = gate
        #: when this pod found itself cut off from the others (its own clock), if it did
        self.cut_off_ns: int | None = None
        self.cut_off_reason = ""


class PeerWatch:
    """Membership, heartbeats and failure announcements of one launch (see the module docstring)."""

    def __init__(
        self,
        worker: str,
        *,
        hosts_store: Callable[[], bool] = lambda: False,
        interval_s: float = HEARTBEAT_INTERVAL_S,
        lost_after_s: float = LOST_AFTER_S,
        silence_limit_s: float | None = SILENCE_LIMIT_S,
        store_timeout_s: float | None = None,
        links: bool = True,
        board: ContactBoard | None = None,
    ) -> None:
        """``lost_after_s``: how long the failure path watches for a peer's heartbeat (a suspicion is
        already there); ``silence_limit_s``: how long a healthy job's peer may be silent before it is
        declared lost (``None``: no liveness watch while healthy); ``store_timeout_s``: the deadline
        of each store operation (default: ``silence_limit_s``, else 30 s); ``links``: also hold a
        connection to the watched peer (:mod:`.peer_link`), so that a peer whose processes ended is
        found at once rather than after ``silence_limit_s``; ``board``: the object store, the third
        party of an even split (:mod:`.isolation_gate`)."""
        self.worker = worker
        self.board = board
        self._hosts_store = hosts_store
        self.interval_s = interval_s
        self.lost_after_s = lost_after_s
        self.silence_limit_s = silence_limit_s
        self.store_timeout_s = store_timeout_s if store_timeout_s is not None else (silence_limit_s or 30.0)
        self.links = links and silence_limit_s is not None
        #: a failed pod's agent lives on (soft restarts): its process ending is a verdict (:meth:`_silence_expected`)
        self.failed_pods_live_on = False
        self._lock = threading.Lock()
        self._store_lock = threading.Lock()  # no store operation in flight while workers fork
        self._round: _Round | None = None
        self._thread: threading.Thread | None = None
        self._on_peer_failure: Callable[[], None] | None = None
        self._on_peer_lost: Callable[[tuple[LostPeer, ...]], None] | None = None
        #: the heartbeat's iterations (an unexpected error costs one beat's look, never the
        #: heartbeat), and the death of its thread if it died anyway: both for the report
        self._beats = LoopGuard("peer watch")
        self._death: str | None = None

    def when_a_peer_fails(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (from the heartbeat thread, once per round) when another pod announces a failure."""
        self._on_peer_failure = callback

    def when_a_peer_is_lost(self, callback: Callable[[tuple[LostPeer, ...]], None]) -> None:
        """Call ``callback`` (on a thread of its own, each time new ones are declared) with every peer
        declared lost so far while the job was healthy (a frozen or partitioned node, or the store's
        host when the store froze)."""
        self._on_peer_lost = callback

    # --- the agent's calls ---------------------------------------------------------------------

    def joined(self, joined: JoinedRound) -> None:
        """A rendezvous round is complete: publish this pod and start (again) the heartbeat."""
        self.close()  # the previous round's store client is not used again
        first = min(joined.global_ranks, default=0)
        own = Member(joined.group_rank, self.worker, first, len(joined.global_ranks), self._safe_hosts_store())
        gate = IsolationGate(self.worker, contact=secrets.token_hex(8), board=self.board,
                             wait_s=self.silence_limit_s or self.lost_after_s, api=api_endpoint())
        current = _Round(joined, own, BoundedStore(joined.store, self.store_timeout_s), self._round_call, gate)
        with self._lock:
            self._round = current
        if joined.group_world_size < 2:
            return  # a pod alone has no peer to watch or to be watched by: no thread, no store traffic
        self._call(current, "set", alive_key(own.group_rank), str(time.time_ns()))
        endpoint = self._listen(joined.store)
        self._guarded(current, lambda _: current.ledger.join(own, endpoint, gate.contact))
        self._thread = start_guarded(lambda: self._run(current), name="rootcause-peer-watch",
                                     on_death=lambda error: self._watch_died(current, error))

    def finish(self) -> None:
        """This pod is done with the round (its launch returned): say so, so that the silence that
        follows is not taken for a lost pod, then stop the heartbeat."""
        current = self._current()
        if current is not None and current.world_size >= 2:
            self._guarded(current, lambda _: current.ledger.done())
        self.stop()

    def stop(self) -> None:
        """Stop the heartbeat of the current round (its membership stays known)."""
        with self._lock:
            current = self._round
        if current is not None:
            current.stop.set()
            current.wake.set()
            if current.link is not None:
                current.link.release()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2 * self.interval_s + 1)

    def close(self) -> None:
        """Stop the heartbeat and release the current round's store client (its helper thread).

        Called when a new round replaces it and when the launch is over: a process that runs
        launches one after another (tests, a notebook) would otherwise keep one idle thread per launch.
        """
        self.stop()
        current = self._current()
        if current is not None and isinstance(current.store, BoundedStore):
            current.store.close()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No store operation of this watch is in flight while this thread forks in the block (the
        agent forks its workers in it): each ``fork`` this thread makes waits for the operation in
        flight, if any, and the next one waits for the fork (:func:`_hold_store_locks_at_fork`).

        The heartbeat goes on between the forks: a pause that held the store for the whole block
        would silence this pod for as long as its workers take to start, and its peers would take
        the silence for a lost pod (with its link cut by the network, within two beats)."""
        thread = threading.get_ident()
        with _forking_lock:
            _forking.setdefault(thread, []).append(self._store_lock)
        try:
            yield
        finally:
            with _forking_lock:
                locks = _forking.get(thread, [])
                if self._store_lock in locks:
                    locks.remove(self._store_lock)
                if not locks:
                    _forking.pop(thread, None)

    def members(self) -> tuple[Member, ...]:
        """The members of the current round known so far, by group rank."""
        with self._lock:
            current = self._round
            return () if current is None else tuple(current.members[r] for r in sorted(current.members))

    def round_store(self) -> RoundStore | None:
        """The current round's store (every call bounded in time) and this pod's place in the round,
        for what the pods exchange beside the watch (the agreement on one report); ``None`` before
        the first round."""
        current = self._current()
        if current is None:
            return None

        def call(operation: str, *args: Any) -> Any:
            with self._store_lock:  # one operation at a time on the round's client, the heartbeat's included
                return current.store.call(operation, *args)

        return RoundStore(call, current.own.group_rank, current.world_size, current.own.hosts_store, current.ledger)

    def declared_lost(self) -> tuple[LostPeer, ...]:
        """The peers declared lost in the current round while the job was healthy (no failure yet)."""
        current = self._current()
        if current is None:
            return ()
        with self._lock:
            return _in_rank_order(current.verdicts)

    def announce_failure(self, stalled: CollectivePosition | None = None) -> None:
        """Tell the peers this pod's workers failed (so they do not take it for a lost pod), and in
        which collective they timed out, if they did (so a peer can name its rank that never entered it)."""
        current = self._current()
        if current is None:
            return
        self._guarded(current, lambda _: current.ledger.failed(stalled))

    def leave(self) -> None:
        """Say this pod is done with the store; if it hosts it, keep it until every peer is done too.

        The store dies with its host's process. A peer still looking for lost pods when it goes
        (:meth:`lost_peers`) would find it gone and name this pod lost, although it announced its
        failure. The host waits for every peer's "done" (each says it after its own search), or for
        as long as one search can take, whichever comes first; the pods of a failed job get there
        within moments of each other, so the wait is short unless a peer is really gone (one this
        agent found lost is not waited for).
        """
        current = self._current()
        if current is None or current.world_size < 2:
            return
        self._guarded(current, lambda _: current.ledger.done())
        if not current.own.hosts_store:
            return
        pending = {rank for rank in range(current.world_size) if rank != current.own.group_rank} - current.lost
        deadline = time.monotonic() + self.lost_after_s + 2 * self.interval_s
        while pending and time.monotonic() < deadline:
            if not self._refresh(current):
                return
            pending -= current.ledger.done_ranks()
            if pending:
                time.sleep(self.interval_s / 5)

    def announced_stalls(self, wait_s: float = 0.0) -> tuple[CollectivePosition, ...]:
        """The collectives other pods announced they timed out in (read from the store now; with
        ``wait_s``, read again until one is announced, every peer has announced its failure (a
        pod writes its stall before its failure), or ``wait_s`` has passed)."""
        current = self._current()
        if current is None or current.world_size < 2:
            return ()
        deadline = time.monotonic() + wait_s
        others = set(range(current.world_size)) - {current.own.group_rank}
        while True:
            answered = self._refresh(current)
            stalls = tuple(stall for rank, stall in sorted(current.ledger.stalls().items())
                           if rank != current.own.group_rank)
            every_peer_failed = current.ledger.failed_ranks() >= others
            if stalls or not answered or time.monotonic() >= deadline or every_peer_failed:
                return stalls
            time.sleep(min(self.interval_s / 5, max(0.0, deadline - time.monotonic())))

    def lost_peers(self) -> tuple[LostPeer, ...]:
        """The peers that are gone: no heartbeat and no failure announced within ``lost_after_s``."""
        current = self._current()
        if current is None:
            return ()
        if current.verdicts:  # reached while the job was healthy: nothing left to watch for
            current.lost |= set(current.verdicts)
            return _in_rank_order(current.verdicts)
        pending = {rank for rank in range(current.world_size) if rank != current.own.group_rank}
        baseline: dict[int, int | None] = {}
        store_gone = False
        for rank in sorted(pending):
            beat, ok = self._read_beat(current, rank)
            if not ok:
                store_gone = True
                break
            baseline[rank] = beat
        deadline = time.monotonic() + self.lost_after_s
        judged: dict[int, LostPeer] = {}  # verdicts other pods reached meanwhile (a link that closed)
        seen = 0  # this search's own place in the ledger's verdicts
        while pending and not store_gone:
            if not self._refresh(current):
                store_gone = True
                break
            verdicts, seen = current.ledger.verdicts(seen)
            for peer in verdicts:
                if peer.group_rank in pending:
                    pending.discard(peer.group_rank)
                    judged[peer.group_rank] = peer
            pending -= current.ledger.failed_ranks()
            for rank in sorted(pending):
                beat, ok = self._read_beat(current, rank)
                if not ok:
                    store_gone = True
                    break
                if beat != baseline.get(rank):
                    pending.discard(rank)
            if not pending or store_gone or time.monotonic() >= deadline:
                break
            time.sleep(min(self.interval_s / 2, max(0.0, deadline - time.monotonic())))
        if store_gone:
            pending = {rank for rank in pending if self._member(current, rank).hosts_store}
        # the store's host is named on this pod's own word; its clock: while its store answered
        last_seen = {rank: current.store_answered_ns if store_gone else baseline.get(rank) for rank in pending}
        found = self._accuse(current, {
            rank: LostPeer(rank, self._member(current, rank).worker, last_seen[rank]) for rank in pending
        }, publish=False, block=True) or {}
        current.lost |= set(found) | set(judged)
        found.update(
            (rank, dataclasses.replace(peer, worker=self._member(current, rank).worker,
                                       last_seen_ns=peer.last_seen_ns or baseline.get(rank)))
            for rank, peer in judged.items()
        )
        return _in_rank_order(found)

    # --- the watch's thread --------------------------------------------------------------------

    def _run(self, current: _Round) -> None:
        """The heartbeat thread: one :meth:`_beat` per pause. A beat that raises what nobody expected
        costs that beat's look only (:class:`rootcause_engine.thread_guard.LoopGuard`: logged, kept for the report):
        a heartbeat that stopped would make the peers declare this healthy pod lost."""
        while not current.stop.is_set():
            pause = self._beats.run(lambda: self._beat(current))
            current.wake.wait(self.interval_s if pause is None else pause)
            current.wake.clear()
        if current.link is not None:  # released here too: a link made as the round was stopped
            current.link.release()

    def _beat(self, current: _Round) -> float:
        """One heartbeat (written first: whatever fails after it, this pod was seen alive) and one
        look at the ledger and the watched peer; the pause until the next."""
        beat = self._call(current, "set", alive_key(current.own.group_rank), str(time.time_ns()))
        answered = beat is not None and self._refresh(current)
        if len(current.members) < current.world_size:
            self._learn_members(current)
        if self.silence_limit_s is not None:
            self._watch_liveness(current, store_answered=answered)
        if not current.told_peer_failure and self._on_peer_failure is not None and self._a_peer_failed(current):
            current.told_peer_failure = True
            # on a thread of its own: ending this pod's workers takes up to the teardown grace,
            # and the heartbeat must go on meanwhile (the other pods take a silent pod for lost)
            threading.Thread(
                target=_call_logged, args=(self._on_peer_failure,), name="rootcause-peer-failed", daemon=True
            ).start()
        # until the store host is known, look again soon: a pod that hosts the store and is lost
        # before its peers read its entry could not be named (its peers only see the store go)
        complete = len(current.members) >= current.world_size or current.store_host_known
        return min(self.interval_s if complete else MEMBERS_POLL_S, self._until_link_verdict(current))

    def _watch_died(self, current: _Round, error: BaseException) -> None:
        """The heartbeat thread died anyway (:func:`rootcause_engine.thread_guard.run_guarded` logged it): this pod
        says it failed, in the ledger, so that its peers read its silence as a failing pod (which
        writes its own report, with this note) and not as a lost one."""
        self._death = f"{type(error).__name__}: {str(error)[:300]}"
        self._guarded(current, lambda _: current.ledger.failed(None))

    # --- liveness while healthy ----------------------------------------------------------------

    def _watch_liveness(self, current: _Round, *, store_answered: bool) -> None:
        """One look: the store itself, this pod's successor, and the verdicts other pods reached."""
        limit = self.silence_limit_s
        assert limit is not None
        now = time.monotonic()
        if not store_answered:
            # silent since the first call that failed, or since the stuck call was sent, if earlier
            stuck_since = now - current.store.unresponsive_for_s
            current.store_silent_since = min(current.store_silent_since or now, stuck_since)
            if now - current.store_silent_since >= limit:
                self._store_host_lost(current)
            return
        current.store_silent_since = None
        self._learn_witnesses(current)
        self._watch_successor(current, now, limit)
        self._read_verdicts(current)

    def _successor(self, current: _Round) -> int | None:
        """The next group rank after this pod's, cyclically, not already known lost."""
        own = current.own.group_rank
        for step in range(1, current.world_size):
            rank = (own + step) % current.world_size
            if rank not in current.verdicts:
                return rank
        return None

    def _watch_successor(self, current: _Round, now: float, limit: float) -> None:
        rank = self._successor(current)
        if rank is None:
            return
        if rank != current.watched:  # a new successor: its silence is counted from now
            current.watched, current.watched_beat, current.watched_since = rank, None, now
            self._drop_link(current)
        if self.links and current.link is None:
            self._link_to(current, rank)
        beat, ok = self._read_beat(current, rank)
        if not ok:
            return
        if beat is not None and beat != current.watched_beat:
            current.watched_beat, current.watched_since = beat, now
            if current.link_closed_at is not None and current.link_closed_at < now:
                current.beats_after_close += 1
        silent_for = now - current.watched_since
        link_closed = self._link_closed(current, rank, now)
        if link_closed:
            # its connection closed: lost once its heartbeat has stopped too (a beat or two), not
            # after the whole silence limit; while it still beats, the network cut the link
            if silent_for < LINK_CONFIRM_BEATS * self.interval_s:
                return
        # a peer never seen alive gets twice the limit: pods leave the rendezvous together, but a
        # starved agent may publish its first beat late
        elif silent_for < (limit if current.watched_beat is not None else 2 * limit):
            return
        # what it said is read again now: a failure announced in the last moments is no silence
        if not self._refresh(current) or self._silence_expected(current, rank, link_closed):
            current.watched_since = now
            return
        if link_closed and self._answers(current, rank):
            return  # its agent's process lives: the silence limit judges it, from its last beat
        verdict = LostPeer(rank, self._member(current, rank).worker, current.watched_beat)
        found = self._accuse(current, {rank: verdict}, publish=True)
        if found is None:
            return  # the gate awaits a third party: looked at again at the next beat
        if not found:
            current.watched_since = now  # looked at again after another silence limit
            return
        if current.link_closed_at is not None:
            logger.error("peer watch: %s (group rank %d): its agent's process ended without a word (its "
                         "connection closed, and no heartbeat for %.1f s): declared lost",
                         verdict.worker, rank, silent_for)
        else:
            logger.error("peer watch: %s (group rank %d) sent no heartbeat for %.1f s: declared lost",
                         verdict.worker, rank, silent_for)
        self._record_verdicts(current, found)

    def _silence_expected(self, current: _Round, rank: int, link_closed: bool) -> bool:
        """Whether the watched peer said why it would go silent: it finished, or it failed. Under soft
        restarts (:attr:`failed_pods_live_on`) a failed pod's agent lives on, restarting its workers
        or ending the job for every pod; one whose agent's process ended too (its link closed, its
        heartbeat stopped) did neither, and the others would wait for it until their collective
        timeout: it is lost, and the world goes on without it."""
        if rank in current.ledger.done_ranks():
            return True
        return rank in current.ledger.failed_ranks() and not (self.failed_pods_live_on and link_closed)

    def _link_closed(self, current: _Round, rank: int, now: float) -> bool:
        """Whether the link to the watched peer closed and its heartbeat has not moved on since.

        A link that closed while the peer's heartbeat kept moving (beats seen after the close) was
        cut by the network, not by the end of the peer's process: it is logged and made again, and
        its closing is evidence no more."""
        link = current.link
        if link is None or not link.closed:
            return False
        if current.link_closed_at is None:
            current.link_closed_at, current.beats_after_close = now, 0
        if current.beats_after_close < _BEATS_PROVING_LIFE:
            return True
        logger.warning("peer watch: the connection to %s (group rank %d) closed, but its heartbeat goes on: "
                       "the network cut it (a proxy's idle timeout, a conntrack flush); not a verdict, "
                       "connecting again", self._member(current, rank).worker, rank)
        self._drop_link(current)
        if self.links:
            self._link_to(current, rank)
        return False

    def _answers(self, current: _Round, rank: int) -> bool:
        """Whether the watched peer, whose link closed and whose heartbeat has paused, still answers a
        fresh connection to its link listener (:func:`~.peer_link.answers`): a live agent's hub greets
        it, even while that agent's heartbeat waits (a store call that takes long, a pause), and the
        kernel of one paused whole accepts it; a pod whose processes ended refuses it at once (its
        port is closed), and a lost one's address does not answer. A peer that answers keeps its
        link (made again) and is judged by the silence limit alone, counted from its last beat: the
        closing is evidence no more."""
        link = current.link
        if link is None or not answers(link.endpoint):
            return False
        logger.warning("peer watch: the connection to %s (group rank %d) closed and its heartbeat paused, but its "
                       "agent answers a new connection: not a verdict, connecting again",
                       self._member(current, rank).worker, rank)
        self._drop_link(current)
        if self.links:
            self._link_to(current, rank)
        return True

    def _until_link_verdict(self, current: _Round) -> float:
        """Seconds until a watched peer whose link closed has been silent long enough for a verdict
        (the next look is then, not a whole beat later); a beat when no link closed."""
        remaining = current.watched_since + LINK_CONFIRM_BEATS * self.interval_s - time.monotonic()
        # past it (the verdict waits for the store, or for a peer that said "done"): a beat, never a spin
        return remaining if current.link_closed_at is not None and remaining > 0 else self.interval_s

    def _drop_link(self, current: _Round) -> None:
        if current.link is not None:
            current.link.release()
        current.link, current.link_closed_at, current.beats_after_close = None, None, 0

    def _listen(self, store: Any) -> LinkEndpoint | None:
        """This process's link endpoint, on the address it reaches the rendezvous store from."""
        if not self.links:
            return None
        address = store_address(store)
        return None if address is None else link_hub().listen(address)

    def _link_to(self, current: _Round, rank: int) -> None:
        """Connect to the watched peer's agent, once it has published where it listens (a peer that
        publishes no endpoint, or cannot be reached, is watched by heartbeat alone)."""
        joined = current.ledger.joined().get(rank)
        endpoint = None if joined is None else joined.link
        if endpoint is not None:
            current.link = link_hub().watch(endpoint, on_closed=current.wake.set)

    def _read_verdicts(self, current: _Round) -> None:
        """Take the verdicts other pods appended to the ledger since the last look (read at this
        beat's refresh)."""
        verdicts, current.verdicts_seen = current.ledger.verdicts(current.verdicts_seen)
        found = {
            peer.group_rank: dataclasses.replace(peer, worker=self._member(current, peer.group_rank).worker)
            for peer in verdicts
            if peer.group_rank != current.own.group_rank and peer.group_rank not in current.verdicts
        }
        self._record_verdicts(current, found)

    def _store_host_lost(self, current: _Round) -> None:
        """The store has not answered for ``silence_limit_s``: the pod that hosts it is lost."""
        hosts = [rank for rank, member in current.members.items() if member.hosts_store]
        accused = {
            rank: LostPeer(rank, self._member(current, rank).worker, current.store_answered_ns)
            for rank in hosts
            if rank != current.own.group_rank and rank not in current.verdicts
        }
        found = self._accuse(current, accused, publish=False)  # the store is gone: nowhere to publish
        if found is None:
            return  # the gate awaits a third party: looked at again at the next beat
        if accused and not found:
            current.store_silent_since = time.monotonic()  # looked at again after another silence limit
            return
        if found:
            logger.error("peer watch: the rendezvous store stopped answering: its host %s is lost",
                         ", ".join(peer.worker for peer in found.values()))
        self._record_verdicts(current, found)

    # --- the isolation rule -----------------------------------------------------------------------

    def _learn_witnesses(self, current: _Round) -> None:
        """Take, from their ``join``, where the peers after this pod listen (:data:`ISOLATION_WITNESSES`
        of them and the successor): the witnesses this pod probes before it declares anyone lost. A
        peer that published no endpoint is no witness."""
        if not self.links:
            return
        wanted = [(current.own.group_rank + step) % current.world_size
                  for step in range(1, min(current.world_size, ISOLATION_WITNESSES + 2))]
        if all(rank in current.witnesses for rank in wanted):
            return
        joined = current.ledger.joined()
        for rank in wanted:
            link = joined[rank].link if rank in joined else None
            if link is not None:
                current.witnesses[rank] = link

    def _accuse(self, current: _Round, accused: dict[int, LostPeer], *, publish: bool,
                block: bool = False) -> dict[int, LostPeer] | None:
        """The one gate of every lost-pod verdict, on every road (the healthy job's watch of its
        successor, a store that stopped answering, the failure path's search): the accused the
        isolation gate (:mod:`.isolation_gate`) lets this pod name, those of whom only the link with
        this pod was lost marked so (``link_with``); nothing when this pod is the one cut off; ``None``
        while the gate awaits a third party's word (unless ``block``). With ``publish``, the
        verdicts on lost pods are appended to the round's ledger, for every pod (a failed append:
        this pod acts on them all the same); a lost link concerns this pod alone."""
        if not accused:
            return {}
        joined = current.ledger.joined()
        suspects = {rank: Suspect(peer.worker, joined[rank].contact if rank in joined else None)
                    for rank, peer in accused.items()}
        witnesses = [endpoint for rank, endpoint in sorted(current.witnesses.items())
                     if rank not in accused and rank not in current.verdicts and rank != current.own.group_rank]
        answer = current.gate.judge(suspects, witnesses[:ISOLATION_WITNESSES], block=block)
        if answer.pending:
            return None
        if answer.cut_off is not None:
            if current.cut_off_ns is None:
                current.cut_off_ns = time.time_ns()
                logger.error("peer watch: %s", answer.cut_off)
            current.cut_off_reason = answer.cut_off
            return {}
        found = {rank: peer for rank, peer in accused.items() if rank in answer.lost}
        if publish:
            for peer in found.values():
                self._guarded(current, lambda _, peer=peer: current.ledger.lost(peer))
        for rank in answer.links:
            found[rank] = dataclasses.replace(accused[rank], link_with=current.own.worker)
            logger.error("peer watch: only the network link between this pod and %s (group rank %d) was lost: both "
                         "live and reach as much; both are named", accused[rank].worker, rank)
        return found

    def watch_note(self) -> str | None:
        """For the report, what happened to this pod's own watch: it found itself cut off from its
        peers (when, and what it saw); its heartbeat's looks failed, or its thread died; its peer
        link hub failed. ``None`` when none of these."""
        current = self._current()
        notes = [self._beats.note()]
        if current is not None and current.cut_off_ns is not None:
            notes.insert(0, f"This pod was cut off from its peers at {rfc3339_ns(current.cut_off_ns)}: "
                            f"{current.cut_off_reason}.")
        if self._death is not None:
            notes.append(f"This pod's peer watch stopped ({self._death}): it announced its failure to its "
                         "peers, so that they would not take its silence for a lost pod.")
        if self.links:
            notes.append(hub_note())
        return " ".join(note for note in notes if note) or None

    def _record_verdicts(self, current: _Round, found: dict[int, LostPeer]) -> None:
        if not found:
            return
        with self._lock:
            current.verdicts.update(found)
            current.lost |= set(found)
        if self._on_peer_lost is not None:
            lost = _in_rank_order(current.verdicts)
            threading.Thread(
                target=_call_logged, args=(lambda: self._on_peer_lost(lost),), name="rootcause-peer-lost",
                daemon=True,
            ).start()

    def _a_peer_failed(self, current: _Round) -> bool:
        """Another pod announced a failure in this round (as of this beat's look at the ledger)."""
        return bool(current.ledger.failed_ranks() - {current.own.group_rank})

    def _learn_members(self, current: _Round) -> None:
        """Take the members whose ``join`` this beat's look at the ledger read. Until the store's
        host is known the heartbeat looks again soon (:data:`MEMBERS_POLL_S`): a pod that hosts the
        store and is lost before its peers read its entry could not be named."""
        for rank, joined in current.ledger.joined().items():
            if rank not in current.members:
                with self._lock:
                    current.members[rank] = joined.member
                current.store_host_known |= joined.member.hosts_store

    # --- store access --------------------------------------------------------------------------

    def _current(self) -> _Round | None:
        with self._lock:
            return self._round

    def _member(self, current: _Round, rank: int) -> Member:
        """Member ``rank``: known, else read from the ledger now (a pod lost before the heartbeat
        thread's next look at the members must still be named by its pod name), else known by its
        group rank only."""
        with self._lock:
            known = current.members.get(rank)
        if known is None and self._refresh(current):
            self._learn_members(current)
            with self._lock:
                known = current.members.get(rank)
        return known if known is not None else Member(rank, f"group rank {rank}", -1, 0)

    def _refresh(self, current: _Round) -> bool:
        """Read the ledger's new events; whether the store answered."""
        _, answered = self._guarded(current, lambda _: current.ledger.refresh())
        return answered

    def _round_call(self, current: _Round) -> StoreCall:
        """The store operation the round's ledger calls: the watch's own (one at a time, the
        store's last answer noted)."""
        return lambda operation, *args: self._store_call(current, operation, *args)

    def _read(self, current: _Round, key: str) -> tuple[bytes | None, bool]:
        """``(value or None when the key is absent, whether the store answered)``."""
        present = self._call(current, "check", [key])
        if present is None:
            return None, False
        if not present:
            return None, True
        value = self._call(current, "get", key)
        return (value, True) if isinstance(value, bytes) else (None, False)

    def _read_beat(self, current: _Round, rank: int) -> tuple[int | None, bool]:
        """``(peer rank's last heartbeat in ns, or None when absent or not a time, whether the store
        answered)``: a forged heartbeat is no beat."""
        value, ok = self._read(current, alive_key(rank))
        return time_value(value, alive_key(rank)), ok

    def _store_call(self, current: _Round, operation: str, *args: Any) -> Any:
        """One store operation, raising what the store raises (or ``StoreUnresponsive``).

        An answer proves the store's host was alive some time after the request was sent: the send
        time is what "last seen alive" can claim (the answer itself may be read much later).
        """
        with self._store_lock:
            sent_ns = time.time_ns()
            result = current.store.call(operation, *args)
        current.store_answered_ns = max(sent_ns, current.store_answered_ns or 0)
        return result

    def _call(self, current: _Round, operation: str, *args: Any) -> Any:
        """One store operation; ``None`` when the store did not answer (``True`` for an answer of ``None``)."""
        result, answered = self._guarded(current, lambda call: call(operation, *args))
        return (True if result is None else result) if answered else None

    def _guarded(self, current: _Round, operations: Callable[[StoreCall], T]) -> tuple[T | None, bool]:
        """``(operations(call), True)``, where ``call`` runs one store operation as :meth:`_store_call`
        does; ``(None, False)`` when one of them failed (the store did not answer): never raised."""
        try:
            return operations(lambda operation, *args: self._store_call(current, operation, *args)), True
        except STORE_ERRORS as error:
            logger.debug("rendezvous store call failed: %s", error)
            return None, False

    def _safe_hosts_store(self) -> bool:
        try:
            return bool(self._hosts_store())
        except OSError:
            return False


#: The store locks of the watches whose owner is in :meth:`PeerWatch.paused`, by the thread that
#: forks there, and those held across the fork that thread is making now.
_forking: dict[int, list[threading.Lock]] = {}
_held_at_fork: dict[int, list[threading.Lock]] = {}
_forking_lock = threading.Lock()


def _hold_store_locks_at_fork() -> None:
    """Before a ``fork`` of a thread in :meth:`PeerWatch.paused`: wait for the store operations in
    flight (each is bounded by the store's deadline) and let no new one start until the fork is made."""
    thread = threading.get_ident()
    with _forking_lock:
        locks = list(_forking.get(thread, ()))
    for lock in locks:
        lock.acquire()
    _held_at_fork[thread] = locks


def _release_store_locks_after_fork() -> None:
    for lock in reversed(_held_at_fork.pop(threading.get_ident(), [])):
        lock.release()


def _forget_pauses_in_child() -> None:
    """In the forked child: its copies of the locks are released (no thread of the child holds them),
    and the parent's pauses are not the child's."""
    global _forking, _held_at_fork, _forking_lock
    for lock in _held_at_fork.get(threading.get_ident(), []):
        lock.release()
    _forking, _held_at_fork, _forking_lock = {}, {}, threading.Lock()


os.register_at_fork(before=_hold_store_locks_at_fork, after_in_parent=_release_store_locks_after_fork,
                    after_in_child=_forget_pauses_in_child)


def store_address(store: Any) -> tuple[str, int] | None:
    """The host and port of the TCP store under ``store``'s prefixes; ``None`` for another kind."""
    while isinstance(store, PrefixStore):
        store = store.underlying_store
    return (store.host, store.port) if isinstance(store, TCPStore) else None


def _call_logged(callback: Callable[[], None]) -> None:
    try:
        callback()
    except Exception:  # a failure here must not pass silently, nor take the agent down
        logger.exception("handling a peer's failure announcement failed")


def _in_rank_order(verdicts: dict[int, LostPeer]) -> tuple[LostPeer, ...]:
    return tuple(verdicts[rank] for rank in sorted(verdicts))
