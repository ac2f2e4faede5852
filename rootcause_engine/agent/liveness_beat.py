"""This pod's heartbeat in one round, and its watch of the next pod: heartbeat, then link.

Why: a pod that vanishes or freezes writes no error and closes no socket, so each pod beats in the
round's store and watches one successor (the next group rank not already lost): its heartbeat, and
a connection to its agent (:mod:`.peer_link`) whose closing, with a heartbeat that stopped too,
tells a process that ended within a beat or two instead of the whole silence limit. The heartbeat
is written first at every beat: whatever fails after it, this pod was seen alive. A silent peer is
named only through the isolation gate (:mod:`.lost_verdict`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from rootcause_core.testimony import LostPod
from rootcause_engine.agent.failure_announcements import FailureAnnouncements
from rootcause_engine.agent.lost_verdict import LostVerdicts
from rootcause_engine.agent.peer_link import PeerLink, answers, link_hub
from rootcause_engine.agent.peer_round import PeerRound
from rootcause_engine.thread_guard import GuardedLoop, LoopGuard

logger = logging.getLogger(__name__)

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


class LivenessBeat:
    """The heartbeat thread of one round (see the module docstring).

    ``lost_after_s``: how long a healthy job's peer may be silent before it is declared lost
    (``None``: no watch while healthy, the heartbeat alone); ``links``: also hold a connection to
    the watched peer; ``failed_pods_live_on`` and ``peer_failed`` are asked at each beat (the agent
    may set them after the round began); ``guard``: the watch's iterations, across rounds."""

    def __init__(self, peer_round: PeerRound, verdicts: LostVerdicts, announcements: FailureAnnouncements, *,
                 interval_s: float, lost_after_s: float | None, links: bool,
                 failed_pods_live_on: Callable[[], bool], peer_failed: Callable[[], Callable[[], None] | None],
                 guard: LoopGuard) -> None:
        self._round = peer_round
        self._verdicts = verdicts
        self._announcements = announcements
        self._interval_s = interval_s
        self._lost_after_s = lost_after_s
        self._links = links
        self._failed_pods_live_on = failed_pods_live_on
        self._peer_failed = peer_failed
        self._guard = guard
        self._loop: GuardedLoop | None = None  # the heartbeat's thread, once started
        # the watched successor: its group rank, its last heartbeat (ns), when that last changed
        self._watched: int | None = None
        self._watched_beat: int | None = None
        self._watched_since = time.monotonic()
        self._link: PeerLink | None = None  # this pod's connection to the watched successor's agent
        self._link_closed_at: float | None = None  # when this pod saw that connection close
        self._beats_after_close = 0  # new heartbeats of the watched peer seen since then
        self._store_silent_since: float | None = None  # the store stopped answering then

    @property
    def link(self) -> PeerLink | None:
        """This pod's connection to the watched successor's agent, if it holds one."""
        return self._link

    @property
    def running(self) -> bool:
        return self._loop is not None and self._loop.running

    def start(self, on_death: Callable[[BaseException], None]) -> None:
        """Start the heartbeat thread: one :meth:`_beat` at once, then one per pause. A beat that raises
        what nobody expected costs that beat's look only (the guard logs and keeps it): a heartbeat that
        stopped would make the peers declare this healthy pod lost. ``on_death``: the thread died anyway."""
        self._loop = GuardedLoop("rootcause-peer-watch", self._beat, interval_s=self._interval_s, first_wait=False,
                                 guard=self._guard, on_death=on_death, at_end=self._release_link).start()

    def stop(self, timeout_s: float) -> None:
        """End the heartbeat and release the link; wait up to ``timeout_s`` for the thread (never
        from the thread itself)."""
        self._release_link()
        if self._loop is not None:
            self._loop.stop(timeout_s)

    def _release_link(self) -> None:
        """Also run as the thread ends: a link made as the round was stopped is released too."""
        if self._link is not None:
            self._link.release()

    def _wake(self) -> None:
        """A link closed: the loop's wait ends and the beat runs now, which reads the closing and cuts
        its pause to the verdict's moment."""
        if self._loop is not None:
            self._loop.wake()

    # --- the thread ----------------------------------------------------------------------------

    def _beat(self) -> float:
        """One heartbeat and one look at the ledger and the watched peer; the pause until the next."""
        peer_round, members = self._round, self._round.members
        answered = peer_round.beat() and peer_round.refresh()
        if not members.complete:
            members.learn()
        if self._lost_after_s is not None:
            self._watch_liveness(store_answered=answered)
        self._announcements.tell_if_a_peer_failed(self._peer_failed())
        # until the store host is known, look again soon: a pod that hosts the store and is lost
        # before its peers read its entry could not be named (its peers only see the store go)
        settled = members.complete or members.store_host_known
        return min(self._interval_s if settled else MEMBERS_POLL_S, self._until_link_verdict())

    # --- liveness while healthy ----------------------------------------------------------------

    def _watch_liveness(self, *, store_answered: bool) -> None:
        """One look: the store itself, this pod's successor, and the verdicts other pods reached."""
        limit = self._lost_after_s
        assert limit is not None
        now = time.monotonic()
        if not store_answered:
            # silent since the first call that failed, or since the stuck call was sent, if earlier
            stuck_since = now - self._round.client.unresponsive_for_s
            self._store_silent_since = min(self._store_silent_since or now, stuck_since)
            if now - self._store_silent_since >= limit and self._verdicts.store_host_lost():
                self._store_silent_since = time.monotonic()  # looked at again after another silence limit
            return
        self._store_silent_since = None
        self._verdicts.learn_witnesses()
        self._watch_successor(now, limit)
        self._verdicts.take_published()

    def _successor(self) -> int | None:
        """The next group rank after this pod's, cyclically, not already known lost."""
        own, world = self._round.rank, self._round.world_size
        for step in range(1, world):
            rank = (own + step) % world
            if not self._verdicts.is_declared(rank):
                return rank
        return None

    def _watch_successor(self, now: float, limit: float) -> None:
        rank = self._successor()
        if rank is None:
            return
        if rank != self._watched:  # a new successor: its silence is counted from now
            self._watched, self._watched_beat, self._watched_since = rank, None, now
            self._drop_link()
        if self._links and self._link is None:
            self._link_to(rank)
        beat, ok = self._round.last_beat(rank)
        if not ok:
            return
        if beat is not None and beat != self._watched_beat:
            self._watched_beat, self._watched_since = beat, now
            if self._link_closed_at is not None and self._link_closed_at < now:
                self._beats_after_close += 1
        silent_for = now - self._watched_since
        link_closed = self._link_closed(rank, now)
        if link_closed:
            # its connection closed: lost once its heartbeat has stopped too (a beat or two), not
            # after the whole silence limit; while it still beats, the network cut the link
            if silent_for < LINK_CONFIRM_BEATS * self._interval_s:
                return
        # a peer never seen alive gets twice the limit: pods leave the rendezvous together, but a
        # starved agent may publish its first beat late
        elif silent_for < (limit if self._watched_beat is not None else 2 * limit):
            return
        # what it said is read again now: a failure announced in the last moments is no silence
        if not self._round.refresh() or self._announcements.silence_expected(
                rank, process_ended=link_closed, failed_pods_live_on=self._failed_pods_live_on()):
            self._watched_since = now
            return
        if link_closed and self._answers(rank):
            return  # its agent's process lives: the silence limit judges it, from its last beat
        verdict = LostPod(rank, self._round.members.member(rank).worker, self._watched_beat)
        found = self._verdicts.accuse({rank: verdict}, publish=True)
        if found is None:
            return  # the gate awaits a third party: looked at again at the next beat
        if not found:
            self._watched_since = now  # looked at again after another silence limit
            return
        if self._link_closed_at is not None:
            logger.error("peer watch: %s (group rank %d): its agent's process ended without a word (its "
                         "connection closed, and no heartbeat for %.1f s): declared lost",
                         verdict.worker, rank, silent_for)
        else:
            logger.error("peer watch: %s (group rank %d) sent no heartbeat for %.1f s: declared lost",
                         verdict.worker, rank, silent_for)
        self._verdicts.record(found)

    # --- the link to the watched peer ----------------------------------------------------------

    def _link_closed(self, rank: int, now: float) -> bool:
        """Whether the link to the watched peer closed and its heartbeat has not moved on since.

        A link that closed while the peer's heartbeat kept moving (beats seen after the close) was
        cut by the network, not by the end of the peer's process: it is logged and made again, and
        its closing is evidence no more."""
        link = self._link
        if link is None or not link.closed:
            return False
        if self._link_closed_at is None:
            self._link_closed_at, self._beats_after_close = now, 0
        if self._beats_after_close < _BEATS_PROVING_LIFE:
            return True
        logger.warning("peer watch: the connection to %s (group rank %d) closed, but its heartbeat goes on: "
                       "the network cut it (a proxy's idle timeout, a conntrack flush); not a verdict, "
                       "connecting again", self._round.members.member(rank).worker, rank)
        self._connect_again(rank)
        return False

    def _answers(self, rank: int) -> bool:
        """Whether the watched peer, whose link closed and whose heartbeat has paused, still answers a
        fresh connection to its link listener (:func:`~.peer_link.answers`): a live agent's hub greets
        it, even while that agent's heartbeat waits (a store call that takes long, a pause), and the
        kernel of one paused whole accepts it; a pod whose processes ended refuses it at once (its
        port is closed), and a lost one's address does not answer. A peer that answers keeps its
        link (made again) and is judged by the silence limit alone, counted from its last beat: the
        closing is evidence no more."""
        link = self._link
        if link is None or not answers(link.endpoint):
            return False
        logger.warning("peer watch: the connection to %s (group rank %d) closed and its heartbeat paused, but its "
                       "agent answers a new connection: not a verdict, connecting again",
                       self._round.members.member(rank).worker, rank)
        self._connect_again(rank)
        return True

    def _connect_again(self, rank: int) -> None:
        self._drop_link()
        if self._links:
            self._link_to(rank)

    def _until_link_verdict(self) -> float:
        """Seconds until a watched peer whose link closed has been silent long enough for a verdict
        (the next look is then, not a whole beat later); a beat when no link closed."""
        remaining = self._watched_since + LINK_CONFIRM_BEATS * self._interval_s - time.monotonic()
        # past it (the verdict waits for the store, or for a peer that said "done"): a beat, never a spin
        return remaining if self._link_closed_at is not None and remaining > 0 else self._interval_s

    def _drop_link(self) -> None:
        if self._link is not None:
            self._link.release()
        self._link, self._link_closed_at, self._beats_after_close = None, None, 0

    def _link_to(self, rank: int) -> None:
        """Connect to the watched peer's agent, once it has published where it listens (a peer that
        publishes no endpoint, or cannot be reached, is watched by heartbeat alone)."""
        joined = self._round.ledger.joined().get(rank)
        endpoint = None if joined is None else joined.link
        if endpoint is not None:
            self._link = link_hub().watch(endpoint, on_closed=self._wake)
