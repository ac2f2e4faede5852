"""One rendezvous round as this pod's peer watch holds it: its store, this pod's place, its members.

Why an object: the heartbeat, the verdicts and the failure path all ask the same questions of the
round (did the store answer, when did it last answer, what is peer ``r``'s last beat, who are the
others), and they used to ask them of a bag of attributes passed from method to method. Here the
round answers them itself, and the parts of the watch (:mod:`.liveness_beat`, :mod:`.lost_verdict`,
:mod:`.failure_announcements`) hold it.

Every store call of the watch goes through :meth:`PeerRound.answered`: a store that does not answer
is a ``False``, never an exception, and each answer records that the store's host was alive when
the call was sent.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from rootcause_core.testimony import Member
from rootcause_engine.agent.bounded_store import STORE_ERRORS, BoundedStore
from rootcause_engine.agent.round_members import RoundMembers
from rootcause_engine.agent.round_store import RoundStore

logger = logging.getLogger(__name__)
T = TypeVar("T")


class PeerRound:
    """One round's store client and what this pod knows of the round (see the module docstring).

    ``store_lock``: held around each store operation (none is in flight while the agent forks its
    workers: ``PeerWatch.paused``); ``members_lock`` guards what other threads read."""

    def __init__(self, own: Member, world_size: int, client: BoundedStore, *, store_lock: threading.Lock,
                 members_lock: threading.Lock) -> None:
        self.own = own
        self.world_size = world_size
        self.client = client
        self._store_lock = store_lock
        #: the store's host was alive then (this pod's clock): the send time of its last answer
        self.store_answered_ns: int | None = None
        #: the round's store as the watch uses it (every answer noted)
        self.store = RoundStore(self._call, own.group_rank, world_size, own.hosts_store)
        self.ledger = self.store.ledger
        self.members = RoundMembers(self.ledger, own, world_size, self.refresh, members_lock)

    @property
    def rank(self) -> int:
        """This pod's group rank."""
        return self.own.group_rank

    def others(self) -> set[int]:
        """The group ranks of the other pods."""
        return {rank for rank in range(self.world_size) if rank != self.rank}

    def answered(self, operations: Callable[[], T]) -> tuple[T | None, bool]:
        """``(operations(), True)``; ``(None, False)`` when one of its store calls failed (the store
        did not answer): never raised."""
        try:
            return operations(), True
        except STORE_ERRORS as error:
            logger.debug("rendezvous store call failed: %s", error)
            return None, False

    def beat(self) -> bool:
        """Write this pod's heartbeat; whether the store answered."""
        return self.answered(self.store.heartbeats.beat)[1]

    def refresh(self) -> bool:
        """Read the ledger's new events; whether the store answered."""
        return self.answered(self.ledger.refresh)[1]

    def last_beat(self, rank: int) -> tuple[int | None, bool]:
        """``(peer rank's last heartbeat in ns, or None when it has none, whether the store answered)``."""
        return self.answered(lambda: self.store.heartbeats.last_beat(rank))

    def shared_store(self) -> RoundStore:
        """The round's store for what the pods exchange beside the watch (the agreement, the hang
        watch): one operation at a time with the watch's own, and the same ledger."""

        def call(operation: str, *args: Any) -> Any:
            with self._store_lock:
                return self.client.call(operation, *args)

        return RoundStore(call, self.rank, self.world_size, self.own.hosts_store, self.ledger)

    def _call(self, operation: str, *args: Any) -> Any:
        """One store operation, raising what the store raises (or ``StoreUnresponsive``).

        An answer proves the store's host was alive some time after the request was sent: the send
        time is what "last seen alive" can claim (the answer itself may be read much later)."""
        with self._store_lock:
            sent_ns = time.time_ns()
            result = self.client.call(operation, *args)
        self.store_answered_ns = max(sent_ns, self.store_answered_ns or 0)
        return result
