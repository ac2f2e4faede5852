"""Who the pods of a rendezvous round are, as this pod learned them from the round's ledger.

Why apart: every verdict, log line and report names a pod by its pod name, which only its ``join``
in the round's ledger (:mod:`.round_ledger`) says. The heartbeat learns the members as their joins
arrive; a pod lost before the next look must still be named, so a question about one member not
known yet reads the ledger again at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from rootcause_core.testimony import Member
from rootcause_engine.agent.round_ledger import RoundLedger


class RoundMembers:
    """The members of one round known so far, this pod's own from the start.

    ``refresh`` reads the ledger's new events (whether the store answered); ``lock`` guards the
    members against the readers on other threads (the agent's, the failure path's)."""

    def __init__(self, ledger: RoundLedger, own: Member, world_size: int, refresh: Callable[[], bool],
                 lock: threading.Lock) -> None:
        self._ledger = ledger
        self._world_size = world_size
        self._refresh = refresh
        self._lock = lock
        self._known: dict[int, Member] = {own.group_rank: own}
        #: whether this pod has read the entry of the pod whose agent hosts the store
        self.store_host_known = own.hosts_store

    @property
    def complete(self) -> bool:
        """Every pod's entry is known."""
        return len(self._known) >= self._world_size

    def learn(self) -> None:
        """Take the members whose ``join`` the last look at the ledger read."""
        for rank, joined in self._ledger.joined().items():
            if rank not in self._known:
                with self._lock:
                    self._known[rank] = joined.member
                self.store_host_known |= joined.member.hosts_store

    def member(self, rank: int) -> Member:
        """Member ``rank``: known, else read from the ledger now (a pod lost before the heartbeat's
        next look must still be named by its pod name), else known by its group rank only."""
        with self._lock:
            known = self._known.get(rank)
        if known is None and self._refresh():
            self.learn()
            with self._lock:
                known = self._known.get(rank)
        return known if known is not None else Member(rank, f"group rank {rank}", -1, 0)

    def known(self) -> tuple[Member, ...]:
        """The members known so far, by group rank."""
        with self._lock:
            return tuple(self._known[rank] for rank in sorted(self._known))
