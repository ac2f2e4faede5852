"""What the pods of one round say of their own end: failed (and in which collective), or done.

Why apart: a pod that says why it goes silent is no lost pod. A failing pod announces its failure
before it diagnoses (and the collective its workers timed out in: a peer can then name its rank
that never entered it); a pod done with the round says so, and the one whose agent hosts the store
keeps it until its peers are done too. The heartbeat reads the others' words here: a peer's failure
ends this pod's workers (once per round), and a watched peer's word excuses its silence.
:class:`CurrentRoundFailures` is how the failure path reaches the round that is current when it calls.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection

from rootcause_core.collectives import CollectivePosition
from rootcause_engine.agent.peer_round import PeerRound
from rootcause_engine.agent.round_ledger import DONE, FAILED
from rootcause_engine.thread_guard import run_soon


class FailureAnnouncements:
    """This pod's failure and end, and the other pods', in one round (see the module docstring)."""

    def __init__(self, peer_round: PeerRound, *, found_lost: Callable[[], Collection[int]] = frozenset) -> None:
        """``found_lost``: the group ranks this pod found lost in the round (the store's host does not
        wait for their "done")."""
        self._round = peer_round
        self._found_lost = found_lost
        self._told_peer_failure = False  # the agent was told a peer failed (once per round)

    def announce(self, stalled: CollectivePosition | None) -> None:
        """Append this pod's failure (and the collective ``stalled`` it timed out in, if any)."""
        self._round.answered(lambda: self._round.ledger.failed(stalled))

    def finish(self) -> None:
        """Append this pod's ``done``: the silence that follows is expected."""
        self._round.answered(lambda: self._round.ledger.mark(DONE))

    def leave(self, *, wait_s: float, poll_s: float) -> None:
        """Say this pod is done; if its agent hosts the store (the store dies with it), keep it until
        every other pod but those found lost said "done" too, or for ``wait_s``. A pod alone: nothing."""
        peer_round = self._round
        if peer_round.world_size < 2:
            return
        self.finish()
        if not peer_round.own.hosts_store:
            return
        pending = peer_round.others() - set(self._found_lost())
        deadline = time.monotonic() + wait_s
        while pending and time.monotonic() < deadline:
            if not peer_round.refresh():
                return
            pending -= peer_round.ledger.ranks(DONE)
            if pending:
                time.sleep(poll_s)

    def stalls(self, *, wait_s: float, poll_s: float) -> tuple[CollectivePosition, ...]:
        """The collectives other pods announced they timed out in (read from the store now; with
        ``wait_s``, read again until one is announced, every peer has announced its failure (a
        pod writes its stall before its failure), or ``wait_s`` has passed). A pod alone: none."""
        peer_round = self._round
        if peer_round.world_size < 2:
            return ()
        deadline = time.monotonic() + wait_s
        others = peer_round.others()
        while True:
            answered = peer_round.refresh()
            stalls = tuple(stall for rank, stall in sorted(peer_round.ledger.stalls().items())
                           if rank != peer_round.rank)
            every_peer_failed = peer_round.ledger.ranks(FAILED) >= others
            if stalls or not answered or time.monotonic() >= deadline or every_peer_failed:
                return stalls
            time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))

    def tell_if_a_peer_failed(self, callback: Callable[[], None] | None) -> None:
        """Call ``callback`` (once per round) if another pod announced a failure, as of the last look
        at the ledger: on a callback thread, for ending this pod's workers takes up to the teardown
        grace and the heartbeat must go on meanwhile (the other pods take a silent pod for lost)."""
        if self._told_peer_failure or callback is None:
            return
        if self._round.ledger.ranks(FAILED) - {self._round.rank}:
            self._told_peer_failure = True
            run_soon(callback, name="rootcause-peer-failed")

    def silence_expected(self, rank: int, *, process_ended: bool, failed_pods_live_on: bool) -> bool:
        """Whether pod ``rank`` said why it would go silent: it finished, or it failed. Under soft
        restarts (``failed_pods_live_on``) a failed pod's agent lives on, restarting its workers or
        ending the job for every pod; one whose agent's process ended too (``process_ended``: its
        link closed, its heartbeat stopped) did neither, and the others would wait for it until
        their collective timeout: it is lost, and the world goes on without it."""
        ledger = self._round.ledger
        if rank in ledger.ranks(DONE):
            return True
        return rank in ledger.ranks(FAILED) and not (failed_pods_live_on and process_ended)


class CurrentRoundFailures:
    """The failure path's word, in whichever round is current when it is called (``PeerWatch.failures``).

    ``current``: the current round's announcements, ``None`` before the first round (every call then
    answers nothing); ``failure_look_s`` and ``interval_s``: the watch's, which bound the store host's
    wait for its peers' "done" and pace the reads of the ledger."""

    def __init__(self, current: Callable[[], FailureAnnouncements | None], *, failure_look_s: float,
                 interval_s: float) -> None:
        self._current = current
        self._failure_look_s = failure_look_s
        self._interval_s = interval_s

    def announce(self, stalled: CollectivePosition | None = None) -> None:
        """Tell the peers this pod's workers failed (so they do not take it for a lost pod), and in
        which collective ``stalled`` they timed out, if they did (so a peer can name its rank that
        never entered it)."""
        announcements = self._current()
        if announcements is not None:
            announcements.announce(stalled)

    def stalls(self, wait_s: float = 0.0) -> tuple[CollectivePosition, ...]:
        """The collectives other pods announced they timed out in (:meth:`FailureAnnouncements.stalls`)."""
        announcements = self._current()
        if announcements is None:
            return ()
        return announcements.stalls(wait_s=wait_s, poll_s=self._interval_s / 5)

    def done(self) -> None:
        """Say this pod is done with the store (its diagnosis is made); if it hosts the store, keep it
        until every peer is done too.

        The store dies with its host's process. A peer still looking for lost pods when it goes
        (``PeerWatch.lost_pods.search``) would find it gone and name this pod lost, although it
        announced its failure. The host waits for every peer's "done" (each says it after its own
        search), or for as long as one search can take, whichever comes first; the pods of a failed
        job get there within moments of each other, so the wait is short unless a peer is really
        gone (one this pod found lost is not waited for)."""
        announcements = self._current()
        if announcements is not None:
            announcements.leave(wait_s=self._failure_look_s + 2 * self._interval_s, poll_s=self._interval_s / 5)
