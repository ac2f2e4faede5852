"""Agent side: who the other pods of the attempt are, and which of them are gone when ours fail.

Why: a pod that vanishes writes no error file, and a frozen one closes no socket. Nothing fails
until a collective times out, 10 to 30 minutes later. Its peers' workers then fail as victims, and
every report names a victim or nothing. The peers are the only witnesses left. So each agent joins
the round's ledger, beats, watches one successor, and names a silent peer lost only through the
isolation gate. :class:`PeerWatch` is the face the agent sees. How, with its parts, costs and
margins: ``docs/frozen_pods.md``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import threading
from collections.abc import Callable, Iterator
from typing import Any

from torch.distributed import PrefixStore, TCPStore

from rootcause_core.liveness import HEARTBEAT_INTERVAL_S, SILENCE_LIMIT_S
from rootcause_core.testimony import LostPod, Member
from rootcause_engine.agent.bounded_store import BoundedStore
from rootcause_engine.agent.failure_announcements import CurrentRoundFailures, FailureAnnouncements
from rootcause_engine.agent.isolation_gate import ContactBoard, IsolationGate, api_endpoint
from rootcause_engine.agent.liveness_beat import LINK_CONFIRM_BEATS, MEMBERS_POLL_S, LivenessBeat
from rootcause_engine.agent.lost_verdict import CurrentRoundLostPods, LostVerdicts
from rootcause_engine.agent.peer_link import LinkEndpoint, PeerLink, hub_note, link_hub
from rootcause_engine.agent.peer_round import PeerRound
from rootcause_engine.agent.round_store import RoundStore
from rootcause_engine.thread_guard import LoopGuard, run_soon
from rootcause_engine.upstream.torch_elastic import JoinedRound

__all__ = ["FAILURE_LOOK_S", "LINK_CONFIRM_BEATS", "MEMBERS_POLL_S", "PeerWatch", "RoundStore", "store_address"]

#: How long a peer may go without a heartbeat (and without announcing a failure) after this pod's
#: workers failed before it counts as lost: several heartbeats, so a busy host's late beat is not
#: taken for a lost pod.
FAILURE_LOOK_S = 2.0


@dataclasses.dataclass(frozen=True)
class _WatchedRound:
    """The current round and the parts of the watch made for it."""

    peer_round: PeerRound
    verdicts: LostVerdicts
    announcements: FailureAnnouncements
    beat: LivenessBeat

    @property
    def link(self) -> PeerLink | None:
        """The heartbeat's connection to the watched successor (tests and benchmarks look at it)."""
        return self.beat.link


class PeerWatch:
    """Membership, heartbeats and failure announcements of one launch (see the module docstring).

    Its methods are the agent's: the callbacks, a round's start and end, the pause for forks, and
    what the report reads. The failure path asks the parts that do the work, through two attributes
    that find the current round when called: :attr:`failures` (``announce``, ``stalls``, ``done``:
    :class:`CurrentRoundFailures`) and :attr:`lost_pods` (``declared``, ``search``:
    :class:`CurrentRoundLostPods`)."""

    def __init__(
        self,
        worker: str,
        *,
        hosts_store: Callable[[], bool] = lambda: False,
        interval_s: float = HEARTBEAT_INTERVAL_S,
        failure_look_s: float = FAILURE_LOOK_S,
        lost_after_s: float | None = SILENCE_LIMIT_S,
        store_timeout_s: float | None = None,
        links: bool = True,
        board: ContactBoard | None = None,
    ) -> None:
        """``failure_look_s``: how long the failure path watches for a peer's heartbeat (a suspicion is
        already there); ``lost_after_s``: how long a healthy job's peer may be silent before it is
        declared lost (``None``: no liveness watch while healthy); ``store_timeout_s``: the deadline
        of each store operation (default: ``lost_after_s``, else 30 s); ``links``: also hold a
        connection to the watched peer (:mod:`.peer_link`), so that a peer whose processes ended is
        found at once rather than after ``lost_after_s``; ``board``: the object store, the third
        party of an even split (:mod:`.isolation_gate`)."""
        self.worker = worker
        self.board = board
        self._hosts_store = hosts_store
        self.interval_s = interval_s
        self.failure_look_s = failure_look_s
        self.lost_after_s = lost_after_s
        self.store_timeout_s = store_timeout_s if store_timeout_s is not None else (lost_after_s or 30.0)
        self.links = links and lost_after_s is not None
        #: a failed pod's agent lives on (soft restarts): its process ending is a verdict
        #: (:meth:`FailureAnnouncements.silence_expected`)
        self.failed_pods_live_on = False
        self._lock = threading.Lock()
        self._store_lock = threading.Lock()  # no store operation in flight while workers fork
        self._round: _WatchedRound | None = None
        self._on_peer_failure: Callable[[], None] | None = None
        self._on_peer_lost: Callable[[tuple[LostPod, ...]], None] | None = None
        #: the heartbeat's iterations (an unexpected error costs one beat's look, never the
        #: heartbeat), and the death of its thread if it died anyway: both for the report
        self._beats = LoopGuard("peer watch")
        self._death: str | None = None
        #: the failure path's word to the peers: its failure, the stalls they announced, its "done"
        self.failures = CurrentRoundFailures(self._current_announcements, failure_look_s=failure_look_s,
                                             interval_s=interval_s)
        #: the peers declared lost while the job was healthy, and the failure path's search for them
        self.lost_pods = CurrentRoundLostPods(self._current_verdicts, failure_look_s=failure_look_s,
                                              interval_s=interval_s)

    def when_a_peer_fails(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (on a callback thread, once per round) when another pod announces a failure."""
        self._on_peer_failure = callback

    def when_a_peer_is_lost(self, callback: Callable[[tuple[LostPod, ...]], None]) -> None:
        """Call ``callback`` (on a callback thread, each time new ones are declared) with every peer
        declared lost so far while the job was healthy (a frozen or partitioned node, or the store's
        host when the store froze)."""
        self._on_peer_lost = callback

    # --- a round's start and end ---------------------------------------------------------------

    def joined(self, joined: JoinedRound) -> None:
        """A rendezvous round is complete: publish this pod and start (again) the heartbeat."""
        self.close()  # the previous round's store client is not used again
        first = min(joined.global_ranks, default=0)
        own = Member(joined.group_rank, self.worker, first, len(joined.global_ranks), self._safe_hosts_store())
        gate = IsolationGate(self.worker, contact=secrets.token_hex(8), board=self.board,
                             wait_s=self.lost_after_s or self.failure_look_s, api=api_endpoint())
        peer_round = PeerRound(own, joined.group_world_size, BoundedStore(joined.store, self.store_timeout_s),
                               store_lock=self._store_lock, members_lock=self._lock)
        verdicts = LostVerdicts(peer_round, gate, witnesses=self.links, told=self._tell_lost, lock=self._lock)
        announcements = FailureAnnouncements(peer_round, found_lost=lambda: verdicts.lost)
        beat = LivenessBeat(peer_round, verdicts, announcements, interval_s=self.interval_s,
                            lost_after_s=self.lost_after_s, links=self.links,
                            failed_pods_live_on=lambda: self.failed_pods_live_on,
                            peer_failed=lambda: self._on_peer_failure, guard=self._beats)
        current = _WatchedRound(peer_round, verdicts, announcements, beat)
        with self._lock:
            self._round = current
        if joined.group_world_size < 2:
            return  # a pod alone has no peer to watch or to be watched by: no thread, no store traffic
        peer_round.beat()
        endpoint = self._listen(joined.store)
        peer_round.answered(lambda: peer_round.ledger.join(own, endpoint, gate.contact))
        beat.start(on_death=lambda error: self._watch_died(current, error))

    def finish(self) -> None:
        """This pod is done with the round (its launch returned): say so, so that the silence that
        follows is not taken for a lost pod, then stop the heartbeat."""
        current = self._current()
        if current is not None and current.peer_round.world_size >= 2:
            current.announcements.finish()
        self.stop()

    def stop(self) -> None:
        """Stop the heartbeat of the current round (its membership stays known)."""
        current = self._current()
        if current is not None:
            current.beat.stop(timeout_s=2 * self.interval_s + 1)

    def close(self) -> None:
        """Stop the heartbeat and release the current round's store client (its helper thread).

        Called when a new round replaces it and when the launch is over: a process that runs
        launches one after another (tests, a notebook) would otherwise keep one idle thread per launch.
        """
        self.stop()
        current = self._current()
        if current is not None:
            current.peer_round.client.close()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No store operation of this watch is in flight while this thread forks in the block (the
        agent forks its workers in it): each ``fork`` this thread makes waits for the operation in
        flight, if any, and the next one waits for the fork (:func:`_hold_store_locks_at_fork`).

        The heartbeat goes on between the forks: a pause that held the store for the whole block
        would silence this pod for as long as its workers take to start, and its peers would take
        the silence for a lost pod (with its link cut by the network, within two beats)."""
        thread = threading.get_ident()
        _forking.setdefault(thread, []).append(self._store_lock)
        try:
            yield
        finally:
            locks = _forking.get(thread, [])
            if self._store_lock in locks:
                locks.remove(self._store_lock)
            if not locks:
                _forking.pop(thread, None)

    # --- what the agent, the agreement and the report read --------------------------------------

    def members(self) -> tuple[Member, ...]:
        """The members of the current round known so far, by group rank."""
        current = self._current()
        return () if current is None else current.peer_round.members.known()

    def round_store(self) -> RoundStore | None:
        """The current round's store (:mod:`.round_store`: every call bounded in time, one at a time
        with the watch's own) and this pod's place in the round, for what the pods exchange beside
        the watch (the agreement on one report, the hang watch's waits); ``None`` before the first round."""
        current = self._current()
        return None if current is None else current.peer_round.shared_store()

    def watch_note(self) -> str | None:
        """For the report, what happened to this pod's own watch: it found itself cut off from its
        peers (when, and what it saw); its heartbeat's looks failed, or its thread died; the round's
        store client failed; its peer link hub failed. ``None`` when none of these."""
        current = self._current()
        notes = [self._beats.note()]
        if current is not None:
            notes.insert(0, current.verdicts.cut_off_note())
            notes.append(current.peer_round.client.note())  # the round's store client: a step failed, or it died
        if self._death is not None:
            notes.append(f"This pod's peer watch stopped ({self._death}): it announced its failure to its "
                         "peers, so that they would not take its silence for a lost pod.")
        if self.links:
            notes.append(hub_note())
        return " ".join(note for note in notes if note) or None

    # --- inside ---------------------------------------------------------------------------------

    def _current(self) -> _WatchedRound | None:
        with self._lock:
            return self._round

    def _current_announcements(self) -> FailureAnnouncements | None:
        current = self._current()
        return None if current is None else current.announcements

    def _current_verdicts(self) -> LostVerdicts | None:
        current = self._current()
        return None if current is None else current.verdicts

    def _tell_lost(self, lost: tuple[LostPod, ...]) -> None:
        callback = self._on_peer_lost
        if callback is not None:
            run_soon(lambda: callback(lost), name="rootcause-peer-lost")

    def _watch_died(self, current: _WatchedRound, error: BaseException) -> None:
        """The heartbeat thread died anyway (:func:`rootcause_engine.thread_guard.run_guarded` logged it): this pod
        says it failed, in the ledger, so that its peers read its silence as a failing pod (which
        writes its own report, with this note) and not as a lost one."""
        self._death = f"{type(error).__name__}: {str(error)[:300]}"
        current.announcements.announce(None)

    def _listen(self, store: Any) -> LinkEndpoint | None:
        """This process's link endpoint, on the address it reaches the rendezvous store from."""
        if not self.links:
            return None
        address = store_address(store)
        return None if address is None else link_hub().listen(address)

    def _safe_hosts_store(self) -> bool:
        try:
            return bool(self._hosts_store())
        except OSError:
            return False


#: The store locks of the watches whose owner is in :meth:`PeerWatch.paused`, by the thread that
#: forks there, and those held across the fork that thread is making now. Each thread reads and
#: writes only its own entry (the one that pauses is the one that forks), so no lock guards them.
_forking: dict[int, list[threading.Lock]] = {}
_held_at_fork: dict[int, list[threading.Lock]] = {}


def _hold_store_locks_at_fork() -> None:
    """Before a ``fork`` of a thread in :meth:`PeerWatch.paused`: wait for the store operations in
    flight (each is bounded by the store's deadline) and let no new one start until the fork is made."""
    thread = threading.get_ident()
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
    global _forking, _held_at_fork
    for lock in _held_at_fork.get(threading.get_ident(), []):
        lock.release()
    _forking, _held_at_fork = {}, {}


os.register_at_fork(before=_hold_store_locks_at_fork, after_in_parent=_release_store_locks_after_fork,
                    after_in_child=_forget_pauses_in_child)


def store_address(store: Any) -> tuple[str, int] | None:
    """The host and port of the TCP store under ``store``'s prefixes; ``None`` for another kind."""
    while isinstance(store, PrefixStore):
        store = store.underlying_store
    return (store.host, store.port) if isinstance(store, TCPStore) else None
