"""What the pods say of their own end (``agent/failure_announcements.py``), on a real ``TCPStore``."""

from __future__ import annotations

import threading

import pytest
from torch.distributed import TCPStore

from rootcause_core.collectives import CollectivePosition
from rootcause_core.testimony import Member
from rootcause_engine.agent.bounded_store import BoundedStore
from rootcause_engine.agent.failure_announcements import FailureAnnouncements
from rootcause_engine.agent.peer_round import PeerRound
from testbed.sync import wait_until
from testbed.tcp_store import client

pytestmark = pytest.mark.timeout(60)


def _pod(port: int, rank: int, world: int = 3, found_lost: frozenset[int] = frozenset()) -> FailureAnnouncements:
    peer_round = PeerRound(Member(rank, f"w{rank}", rank, 1, rank == 0), world, BoundedStore(client(port), 5.0),
                           store_lock=threading.Lock(), members_lock=threading.Lock())
    return FailureAnnouncements(peer_round, found_lost=lambda: found_lost)


def test_a_stall_announced_is_read_by_the_others_and_a_peer_s_failure_told_once(store_server: TCPStore) -> None:
    pods = [_pod(store_server.port, rank) for rank in range(3)]
    stall = CollectivePosition(pg="0", seq=3, op="gloo:all_reduce")
    pods[1].announce(stall)
    assert pods[0].stalls(wait_s=0.0, poll_s=0.01) == (stall,)
    assert pods[1].stalls(wait_s=0.0, poll_s=0.01) == ()  # its own is not news to it
    told: list[int] = []
    for _ in range(3):
        pods[0].tell_if_a_peer_failed(lambda: told.append(1))
    assert wait_until(lambda: told == [1], 10) and told == [1]


def test_a_peer_that_said_it_is_done_or_failed_is_expected_silent(store_server: TCPStore) -> None:
    pods = [_pod(store_server.port, rank) for rank in range(3)]
    pods[1].finish()
    pods[2].announce(None)
    watcher = pods[0]
    watcher.stalls(wait_s=0.0, poll_s=0.01)  # a look at the ledger
    assert watcher.silence_expected(1, process_ended=True, failed_pods_live_on=True)
    assert watcher.silence_expected(2, process_ended=False, failed_pods_live_on=True)
    assert not watcher.silence_expected(2, process_ended=True, failed_pods_live_on=True)  # soft restarts: lost


def test_the_store_host_leaves_once_its_peers_are_done_or_found_lost(store_server: TCPStore) -> None:
    pods = [_pod(store_server.port, rank, found_lost=frozenset({2})) for rank in range(3)]
    pods[1].finish()
    done = threading.Event()
    host = threading.Thread(target=lambda: (pods[0].leave(wait_s=30, poll_s=0.01), done.set()))
    host.start()
    assert done.wait(10)  # pod 2 is not waited for, pod 1 said done
    host.join()
