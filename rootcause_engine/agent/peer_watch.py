"""Agent side: who the other pods of the attempt are, and which of them are gone when ours fail.

Why: a pod that vanishes (a lost node, a preempted VM, an evicted pod: every process of the pod
killed at once) writes no error file. Its peers' workers fail a moment later ("connection closed
by peer") and report themselves, correctly, as victims; without more, every report names a victim
or nothing. The peers are the only witnesses left, so each agent keeps what it needs to testify:

- **membership**: after each rendezvous, each agent publishes in the round's store (the c10d
  rendezvous store, scoped to the round by torch) its group rank, pod name, first global rank,
  worker count, and whether it hosts the store; a background thread reads the others' entries
  until it knows every member;
- **liveness**: the same thread writes a heartbeat key every ``interval_s`` (the pod's wall time);
- **failures**: an agent whose workers failed says so in the store (:meth:`announce_failure`)
  before it diagnoses anything, so its peers know it is not lost, only failing; with it, the
  collective its workers timed out in, if they did (``rootcause_core.collectives``). The heartbeat
  thread of every other pod sees the announcement (one counter read per beat) and calls the
  agent's ``on_peer_failure``: a pod whose workers are all still running, because one of them
  hangs and the others wait for it without a timeout of their own, would otherwise never fail,
  and the hung rank would never be named.

When this pod's workers fail as victims, :meth:`lost_peers` watches the others for up to
``lost_after_s``: a peer whose heartbeat moves on, or that announced a failure, is alive (it will
write its own error file); a peer that does neither is lost. When the store itself stops answering
the pod that hosted it is gone with it; it is then the one peer that can be named (the others may
well be alive, but nothing can tell). The cost in a healthy job: one small store write per pod per
``interval_s``, and reads only until the membership is known.

Each store operation runs on the watch's own thread or on the failure path; a store that has gone
away answers quickly with an error (its host's sockets are closed by the kernel). Store errors are
never raised to the agent: the watch then knows less and says so.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from rootcause_core.collectives import CollectivePosition
from rootcause_core.testimony import LostPeer, Member, member_from_entry
from rootcause_engine.upstream.torch_elastic import JoinedRound

logger = logging.getLogger(__name__)

#: How often each agent writes its heartbeat.
HEARTBEAT_INTERVAL_S = 0.5
#: How long a peer may go without a heartbeat (and without announcing a failure) after this pod's
#: workers failed before it counts as lost: several heartbeats, so a busy host's late beat is not
#: taken for a lost pod.
LOST_AFTER_S = 2.0
#: How often the heartbeat thread looks for members it does not know yet (they publish right after
#: the rendezvous; their workers may fail within a heartbeat interval of it).
MEMBERS_POLL_S = 0.05

_KEY_PREFIX = "rootcause/"


def _member_key(group_rank: int) -> str:
    return f"{_KEY_PREFIX}member/{group_rank}"


def _alive_key(group_rank: int) -> str:
    return f"{_KEY_PREFIX}alive/{group_rank}"


def _failed_key(group_rank: int) -> str:
    return f"{_KEY_PREFIX}failed/{group_rank}"


def _done_key(group_rank: int) -> str:
    return f"{_KEY_PREFIX}done/{group_rank}"


def _stalled_key(group_rank: int) -> str:
    return f"{_KEY_PREFIX}stalled/{group_rank}"


#: How many pods announced a failure in the round (a store counter, read once per heartbeat).
_FAILURES_KEY = f"{_KEY_PREFIX}failures"


#: What the store raises when it cannot be reached (torch's ``DistError`` family is ``RuntimeError``).
_STORE_ERRORS = (RuntimeError, OSError, ValueError)


class _Round:
    """One rendezvous round's store and what this agent learned in it."""

    def __init__(self, joined: JoinedRound, own: Member) -> None:
        self.store: Any = joined.store
        self.world_size = joined.group_world_size
        self.own = own
        self.members: dict[int, Member] = {own.group_rank: own}
        self.stop = threading.Event()
        self.store_answered_ns: int | None = None  # the store's host was alive then (this pod's clock)
        self.lost: set[int] = set()  # group ranks this agent found lost (never waited for again)


class PeerWatch:
    """Membership, heartbeats and failure announcements of one launch (see the module docstring)."""

    def __init__(
        self,
        worker: str,
        *,
        hosts_store: Callable[[], bool] = lambda: False,
        interval_s: float = HEARTBEAT_INTERVAL_S,
        lost_after_s: float = LOST_AFTER_S,
    ) -> None:
        self.worker = worker
        self._hosts_store = hosts_store
        self.interval_s = interval_s
        self.lost_after_s = lost_after_s
        self._lock = threading.Lock()
        self._store_lock = threading.Lock()  # no store operation in flight while workers fork
        self._round: _Round | None = None
        self._thread: threading.Thread | None = None
        self._on_peer_failure: Callable[[], None] | None = None

    def when_a_peer_fails(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (from the heartbeat thread, once per round) when another pod announces a failure."""
        self._on_peer_failure = callback

    # --- the agent's calls ---------------------------------------------------------------------

    def joined(self, joined: JoinedRound) -> None:
        """A rendezvous round is complete: publish this pod and start (again) the heartbeat."""
        self.stop()
        first = min(joined.global_ranks, default=0)
        own = Member(joined.group_rank, self.worker, first, len(joined.global_ranks), self._safe_hosts_store())
        current = _Round(joined, own)
        with self._lock:
            self._round = current
        if joined.group_world_size < 2:
            return  # a pod alone has no peer to watch or to be watched by: no thread, no store traffic
        self._call(current, "set", _member_key(own.group_rank), json.dumps(own.entry()))
        self._thread = threading.Thread(target=self._run, args=(current,), name="rootcause-peer-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the heartbeat of the current round (its membership stays known)."""
        with self._lock:
            current = self._round
        if current is not None:
            current.stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2 * self.interval_s + 1)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No store operation runs during the block (the agent forks its workers in it)."""
        with self._store_lock:
            yield

    def members(self) -> tuple[Member, ...]:
        """The members of the current round known so far, by group rank."""
        with self._lock:
            current = self._round
            return () if current is None else tuple(current.members[r] for r in sorted(current.members))

    def announce_failure(self, stalled: CollectivePosition | None = None) -> None:
        """Tell the peers this pod's workers failed (so they do not take it for a lost pod), and in
        which collective they timed out, if they did (so a peer can name its rank that never entered it)."""
        current = self._current()
        if current is None:
            return
        rank = current.own.group_rank
        if stalled is not None:
            self._call(current, "set", _stalled_key(rank), json.dumps(stalled.to_json()))
        self._call(current, "set", _failed_key(rank), str(time.time_ns()))
        self._call(current, "add", _FAILURES_KEY, 1)

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
        self._call(current, "set", _done_key(current.own.group_rank), str(time.time_ns()))
        if not current.own.hosts_store:
            return
        pending = {rank for rank in range(current.world_size) if rank != current.own.group_rank} - current.lost
        deadline = time.monotonic() + self.lost_after_s + 2 * self.interval_s
        while pending and time.monotonic() < deadline:
            for rank in sorted(pending):
                done, ok = self._read(current, _done_key(rank))
                if not ok:
                    return
                if done is not None:
                    pending.discard(rank)
            if pending:
                time.sleep(self.interval_s / 5)

    def announced_stalls(self) -> tuple[CollectivePosition, ...]:
        """The collectives other pods announced they timed out in (read from the store now)."""
        current = self._current()
        if current is None or current.world_size < 2:
            return ()
        stalls = []
        for rank in range(current.world_size):
            if rank == current.own.group_rank:
                continue
            value, ok = self._read(current, _stalled_key(rank))
            if not ok:
                break
            stall = _parse_stall(value)
            if stall is not None:
                stalls.append(stall)
        return tuple(stalls)

    def lost_peers(self) -> tuple[LostPeer, ...]:
        """The peers that are gone: no heartbeat and no failure announced within ``lost_after_s``."""
        current = self._current()
        if current is None:
            return ()
        pending = {rank for rank in range(current.world_size) if rank != current.own.group_rank}
        baseline: dict[int, bytes | None] = {}
        store_gone = False
        for rank in sorted(pending):
            value, ok = self._read(current, _alive_key(rank))
            if not ok:
                store_gone = True
                break
            baseline[rank] = value
        deadline = time.monotonic() + self.lost_after_s
        while pending and not store_gone:
            for rank in sorted(pending):
                announced, ok = self._read(current, _failed_key(rank))
                beat, ok_beat = self._read(current, _alive_key(rank)) if ok and announced is None else (None, ok)
                if not (ok and ok_beat):
                    store_gone = True
                    break
                if announced is not None or beat != baseline.get(rank):
                    pending.discard(rank)
            if not pending or store_gone or time.monotonic() >= deadline:
                break
            time.sleep(min(self.interval_s / 2, max(0.0, deadline - time.monotonic())))
        if store_gone:
            pending = {rank for rank in pending if self._member(current, rank).hosts_store}
        current.lost |= pending
        return tuple(
            LostPeer(
                rank,
                self._member(current, rank).worker,
                # the store's host was alive while its store answered; any other peer, at its last beat
                current.store_answered_ns if store_gone else _heartbeat_ns(baseline.get(rank)),
            )
            for rank in sorted(pending)
        )

    # --- the watch's thread --------------------------------------------------------------------

    def _run(self, current: _Round) -> None:
        told = False
        while not current.stop.is_set():
            self._call(current, "set", _alive_key(current.own.group_rank), str(time.time_ns()))
            if len(current.members) < current.world_size:
                self._learn_members(current)
            if not told and self._on_peer_failure is not None and self._a_peer_failed(current):
                told = True
                # on a thread of its own: ending this pod's workers takes up to the teardown grace,
                # and the heartbeat must go on meanwhile (the other pods take a silent pod for lost)
                threading.Thread(
                    target=_call_logged, args=(self._on_peer_failure,), name="rootcause-peer-failed", daemon=True
                ).start()
            # until every member is known, look again soon: a pod that hosts the store and is lost
            # before its peers read its entry could not be named (its peers only see the store go)
            complete = len(current.members) >= current.world_size
            current.stop.wait(self.interval_s if complete else min(self.interval_s, MEMBERS_POLL_S))

    def _a_peer_failed(self, current: _Round) -> bool:
        """Another pod announced a failure in this round (its ``failed`` key; this pod's own is not counted)."""
        count = self._call(current, "add", _FAILURES_KEY, 0)
        if not count:
            return False
        own, ok = self._read(current, _failed_key(current.own.group_rank))
        return ok and int(count) > (0 if own is None else 1)

    def _learn_members(self, current: _Round) -> None:
        for rank in range(current.world_size):
            if rank in current.members:
                continue
            value, ok = self._read(current, _member_key(rank))
            if not ok:
                return
            member = _parse_member(value)
            if member is not None and member.group_rank == rank:
                with self._lock:
                    current.members[rank] = member

    # --- store access --------------------------------------------------------------------------

    def _current(self) -> _Round | None:
        with self._lock:
            return self._round

    def _member(self, current: _Round, rank: int) -> Member:
        with self._lock:
            known = current.members.get(rank)
        return known if known is not None else Member(rank, f"group rank {rank}", -1, 0)

    def _read(self, current: _Round, key: str) -> tuple[bytes | None, bool]:
        """``(value or None when the key is absent, whether the store answered)``."""
        present = self._call(current, "check", [key])
        if present is None:
            return None, False
        if not present:
            return None, True
        value = self._call(current, "get", key)
        return (value, True) if value is not None else (None, False)

    def _call(self, current: _Round, operation: str, *args: Any) -> Any:
        """One store operation; ``None`` when the store did not answer."""
        try:
            with self._store_lock:
                result = getattr(current.store, operation)(*args)
        except _STORE_ERRORS as error:
            logger.debug("rendezvous store %s failed: %s", operation, error)
            return None
        current.store_answered_ns = time.time_ns()
        return True if result is None else result

    def _safe_hosts_store(self) -> bool:
        try:
            return bool(self._hosts_store())
        except OSError:
            return False


def _call_logged(callback: Callable[[], None]) -> None:
    try:
        callback()
    except Exception:  # a failure here must not pass silently, nor take the agent down
        logger.exception("handling a peer's failure announcement failed")


def _heartbeat_ns(value: bytes | None) -> int | None:
    """A peer's heartbeat time; ``None`` for none, or for a value that is no time (never trusted)."""
    try:
        ns = int(value.decode()) if value is not None else None
    except (UnicodeDecodeError, ValueError):
        return None
    return ns if ns is not None and 0 <= ns < 2**63 else None


def _parse_stall(value: bytes | None) -> CollectivePosition | None:
    """A stalled collective read from the store; ``None`` for none or anything malformed."""
    if value is None:
        return None
    try:
        return CollectivePosition.from_json(json.loads(value.decode()))
    except (UnicodeDecodeError, ValueError):
        return None


def _parse_member(value: bytes | None) -> Member | None:
    """A member entry read from the store (``Member.entry()`` as JSON), checked by the testimony's parser."""
    if value is None:
        return None
    try:
        return member_from_entry(json.loads(value.decode()))
    except (UnicodeDecodeError, ValueError):
        return None
