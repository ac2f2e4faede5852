"""The round's store with a typed face: one object per family of keys, each method named for what it does.

Why: the peer watch, the agreement and the hang watch all meet in the round's store
(:mod:`rootcause_engine.store_layout`), and each used to spell store operations by name
(``call("compare_set", ...)``), with its own idea of what a silent store returns. Here the keys
and the operations live in one place, and the callers say what they mean: ``heartbeats.beat()``,
``agreement.say(word)``, ``hang_waits.waits_of(ranks)``.

The one error policy: every method raises :class:`~.bounded_store.StoreUnresponsive` or one of
:data:`~.bounded_store.STORE_ERRORS` when the store does not answer (its callers decide what that
means); a reader returns ``None`` for a key that is absent, or for a value that is not what its key
holds (:mod:`.store_values` logs it). Nothing here catches a store error.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from rootcause_engine.agent.round_ledger import RoundLedger
from rootcause_engine.agent.store_values import StoreCall, read_value, time_value
from rootcause_engine.store_layout import AGREED_KEY, alive_key, hang_wait_key, said_key


class Heartbeats:
    """The pods' heartbeats (``alive/<group rank>``: each pod's wall time, rewritten every beat)."""

    def __init__(self, call: StoreCall, own_rank: int) -> None:
        self._call = call
        self._own_rank = own_rank

    def beat(self) -> None:
        """Write this pod's heartbeat: its wall time now."""
        self._call("set", alive_key(self._own_rank), str(time.time_ns()))

    def last_beat(self, rank: int) -> int | None:
        """Pod ``rank``'s last heartbeat (ns); ``None`` when it has none, or one that is no time (a
        forged heartbeat is no beat). Two calls (``check``, then ``get``): a ``get`` of an absent key
        would wait for it."""
        key = alive_key(rank)
        if not self._call("check", [key]):
            return None
        value = self._call("get", key)
        if not isinstance(value, bytes):
            raise ValueError(f"the store answered no value for {key}")
        return time_value(value, key)


class AgreementKeys:
    """The agreement's keys: each failing pod's word (``agree/said/<group rank>``) and the report
    they agreed on (``agree/decided``: the first proposal wins)."""

    def __init__(self, call: StoreCall, own_rank: int) -> None:
        self._call = call
        self._own_rank = own_rank

    def say(self, word: str) -> None:
        """Write this pod's word (a ``PodWord``'s JSON)."""
        self._call("set", said_key(self._own_rank), word)

    def word_of(self, rank: int) -> bytes | None:
        """Pod ``rank``'s word as written (``None``: none yet), in one call that neither waits nor writes."""
        return read_value(self._call, said_key(rank))

    def agree(self, proposal: str) -> bytes:
        """Propose ``proposal`` (an ``AgreedReport``'s JSON); the decision: the first proposal made."""
        return bytes(self._call("compare_set", AGREED_KEY, "", proposal))


class HangWaits:
    """The long waits each pod's hang watch published (``hang/wait/<group rank>``)."""

    def __init__(self, call: StoreCall, own_rank: int) -> None:
        self._call = call
        self._own_rank = own_rank

    def publish_wait(self, text: str) -> None:
        """Write this pod's waits (their text; empty: none)."""
        self._call("set", hang_wait_key(self._own_rank), text)

    def waits_of(self, ranks: Iterable[int]) -> list[bytes | None]:
        """The waits the pods of group ranks ``ranks`` published, in that order (``None``: not yet).
        One read of all of them when all have published; else each key on its own (a pod that just
        joined has not published yet, and a ``multi_get`` would wait for it)."""
        keys = [hang_wait_key(rank) for rank in ranks]
        if self._call("check", keys):
            return list(self._call("multi_get", keys))
        return [self._call("get", key) if self._call("check", [key]) else None for key in keys]


class RoundStore:
    """A rendezvous round's store, one object per family of keys (see the module docstring), and this
    pod's place in the round: its group rank, the pod count, and whether its agent hosts the store.

    ``call`` is the round's store operation (every call bounded in time, one at a time with the peer
    watch's own); only the families use it."""

    def __init__(self, call: StoreCall, group_rank: int, world_size: int, hosts_store: bool,
                 ledger: RoundLedger | None = None) -> None:
        self.group_rank = group_rank
        self.world_size = world_size
        self.hosts_store = hosts_store
        #: the round's ledger: who joined, failed, finished, spoke, read the decision, was found lost
        self.ledger = ledger if ledger is not None else RoundLedger(call, world_size, group_rank)
        self.heartbeats = Heartbeats(call, group_rank)
        self.agreement = AgreementKeys(call, group_rank)
        self.hang_waits = HangWaits(call, group_rank)
