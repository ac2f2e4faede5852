"""One round as the peer watch holds it (``agent/peer_round.py``): a store that does not answer is a
``False``, never an exception, and every answer dates the store's host as alive."""

from __future__ import annotations

import threading

import pytest
from torch.distributed import TCPStore

from rootcause_core.testimony import Member
from rootcause_engine.agent.bounded_store import BoundedStore
from rootcause_engine.agent.peer_round import PeerRound
from testbed.tcp_store import client

pytestmark = pytest.mark.timeout(60)


def _round(port: int, rank: int, world: int = 2) -> PeerRound:
    return PeerRound(Member(rank, f"w{rank}", rank, 1, rank == 0), world, BoundedStore(client(port), 5.0),
                     store_lock=threading.Lock(), members_lock=threading.Lock())


def test_a_beat_is_read_by_the_peer_and_each_answer_dates_the_store(store_server: TCPStore) -> None:
    pods = [_round(store_server.port, rank) for rank in range(2)]
    assert pods[0].store_answered_ns is None and pods[0].others() == {1}
    assert pods[0].beat() and pods[0].store_answered_ns is not None
    beat, answered = pods[1].last_beat(0)
    assert answered and beat is not None
    assert pods[1].last_beat(1) == (None, True)  # answered: no beat yet


def test_a_closed_client_is_a_silent_store_not_an_error(store_server: TCPStore) -> None:
    pod = _round(store_server.port, 1)
    pod.client.close()
    assert not pod.beat() and not pod.refresh()
    assert pod.last_beat(0) == (None, False)


def test_the_shared_store_holds_the_watch_s_ledger_and_this_pod_s_place(store_server: TCPStore) -> None:
    pod = _round(store_server.port, 0)
    shared = pod.shared_store()
    assert shared.ledger is pod.ledger
    assert (shared.group_rank, shared.world_size, shared.hosts_store) == (0, 2, True)
    shared.agreement.say("{}")
    assert pod.store.agreement.word_of(0) == b"{}"
