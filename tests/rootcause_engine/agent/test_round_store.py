"""The round's store, one object per family of keys (``agent/round_store.py``), on a real ``TCPStore``
on loopback: what each method writes is what the others read, an absent key reads ``None``, and a
store that does not answer raises (the one error policy)."""

from __future__ import annotations

from typing import Any

import pytest
from torch.distributed import TCPStore

from rootcause_engine.agent.bounded_store import StoreUnresponsive
from rootcause_engine.agent.round_store import RoundStore
from rootcause_engine.store_layout import alive_key
from testbed.tcp_store import client

pytestmark = pytest.mark.timeout(60)


def _store(port: int, rank: int, world: int = 3) -> RoundStore:
    store = client(port)

    def call(operation: str, *args: Any) -> Any:
        return getattr(store, operation)(*args)

    return RoundStore(call, rank, world, rank == 0)


def test_a_heartbeat_written_is_read_and_a_missing_or_forged_one_is_none(store_server: TCPStore) -> None:
    pods = [_store(store_server.port, rank) for rank in range(2)]
    assert pods[1].heartbeats.last_beat(0) is None
    pods[0].heartbeats.beat()
    beat = pods[1].heartbeats.last_beat(0)
    assert beat is not None and beat > 0
    client(store_server.port).set(alive_key(1), "not a time")
    assert pods[0].heartbeats.last_beat(1) is None


def test_the_words_and_the_first_proposal_are_what_every_pod_reads(store_server: TCPStore) -> None:
    pods = [_store(store_server.port, rank) for rank in range(2)]
    assert pods[0].agreement.word_of(1) is None
    pods[1].agreement.say('{"word": 1}')
    assert pods[0].agreement.word_of(1) == b'{"word": 1}'
    assert pods[0].agreement.agree("first") == b"first"
    assert pods[1].agreement.agree("second") == b"first"


def test_the_waits_of_peers_are_read_together_or_one_by_one_while_one_has_not_published(store_server: TCPStore) -> None:
    pods = [_store(store_server.port, rank) for rank in range(3)]
    pods[1].hang_waits.publish_wait("rank 3 waits")
    assert pods[0].hang_waits.waits_of([1, 2]) == [b"rank 3 waits", None]
    pods[2].hang_waits.publish_wait("")
    assert pods[0].hang_waits.waits_of([1, 2]) == [b"rank 3 waits", b""]


def test_a_store_that_does_not_answer_raises_from_every_family() -> None:
    def silent(operation: str, *args: Any) -> Any:
        raise StoreUnresponsive(f"no answer to {operation}")

    store = RoundStore(silent, 0, 2, True)
    for read in (store.heartbeats.beat, lambda: store.heartbeats.last_beat(1), lambda: store.agreement.word_of(1),
                 lambda: store.hang_waits.waits_of([1]), store.ledger.refresh):
        with pytest.raises(StoreUnresponsive):
            read()
