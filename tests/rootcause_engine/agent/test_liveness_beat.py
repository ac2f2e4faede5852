"""This pod's heartbeat and its watch of the next pod (``agent/liveness_beat.py``), two pods on a
real ``TCPStore``: both beat; once one stops, the other names it lost after the silence limit."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest
from torch.distributed import TCPStore

from rootcause_core.testimony import LostPod, Member
from rootcause_engine.agent.bounded_store import BoundedStore
from rootcause_engine.agent.failure_announcements import FailureAnnouncements
from rootcause_engine.agent.isolation_gate import IsolationGate
from rootcause_engine.agent.liveness_beat import LivenessBeat
from rootcause_engine.agent.lost_verdict import LostVerdicts
from rootcause_engine.agent.peer_link import LinkEndpoint
from rootcause_engine.agent.peer_round import PeerRound
from rootcause_engine.thread_guard import LoopGuard
from testbed.sync import wait_until
from testbed.tcp_store import client

pytestmark = pytest.mark.timeout(60)
INTERVAL_S = 0.05
SILENCE_S = 0.5


def _beat(port: int, rank: int, told: list[tuple[LostPod, ...]]) -> LivenessBeat:
    own = Member(rank, f"w{rank}", rank, 1, rank == 0)
    peer_round = PeerRound(own, 2, BoundedStore(client(port), 5.0), store_lock=threading.Lock(),
                           members_lock=threading.Lock())
    peer_round.answered(lambda: peer_round.ledger.join(own, None))

    def probe(endpoints: Sequence[LinkEndpoint]) -> int:
        return len(endpoints)

    gate = IsolationGate(own.worker, contact=f"c{rank}", board=None, wait_s=0.1, probe=probe)
    verdicts = LostVerdicts(peer_round, gate, witnesses=False, told=told.append, lock=threading.Lock())
    return LivenessBeat(peer_round, verdicts, FailureAnnouncements(peer_round), interval_s=INTERVAL_S,
                        lost_after_s=SILENCE_S, links=False, failed_pods_live_on=lambda: False,
                        peer_failed=lambda: None, guard=LoopGuard("peer watch"))


def test_a_peer_whose_heartbeat_stops_is_named_by_its_watcher(store_server: TCPStore) -> None:
    told: list[tuple[LostPod, ...]] = []
    watcher, watched = _beat(store_server.port, 0, told), _beat(store_server.port, 1, [])
    watcher.start(on_death=lambda error: None)
    watched.start(on_death=lambda error: None)
    try:
        assert watcher.running and watched.running
        threading.Event().wait(4 * SILENCE_S)
        assert told == []  # both beat: no verdict
        watched.stop(timeout_s=1)
        assert not watched.running
        assert wait_until(lambda: bool(told), 10)
        assert [peer.group_rank for peer in told[0]] == [1]
    finally:
        watcher.stop(timeout_s=1)
    assert not watcher.running and watcher.link is None
