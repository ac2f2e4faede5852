"""The lost-pod verdicts of a round, each through the isolation gate (``agent/lost_verdict.py``)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest
from torch.distributed import TCPStore

from rootcause_core.testimony import LostPod, Member
from rootcause_engine.agent.bounded_store import BoundedStore
from rootcause_engine.agent.isolation_gate import IsolationGate
from rootcause_engine.agent.lost_verdict import LostVerdicts
from rootcause_engine.agent.peer_link import LinkEndpoint
from rootcause_engine.agent.peer_round import PeerRound
from testbed.tcp_store import client

pytestmark = pytest.mark.timeout(60)
WORLD = 4


def _round(port: int, rank: int) -> PeerRound:
    return PeerRound(Member(rank, f"w{rank}", rank, 1, rank == 0), WORLD, BoundedStore(client(port), 5.0),
                     store_lock=threading.Lock(), members_lock=threading.Lock())


def _verdicts(peer_round: PeerRound, reached: int, told: list[tuple[LostPod, ...]]) -> LostVerdicts:
    def probe(endpoints: Sequence[LinkEndpoint]) -> int:
        return min(reached, len(endpoints))

    gate = IsolationGate("w0", contact="c0", board=None, wait_s=1.0, probe=probe)
    return LostVerdicts(peer_round, gate, witnesses=True, told=told.append, lock=threading.Lock())


def _joined(port: int) -> PeerRound:
    """Pod 0, having read every pod's join (each with a link endpoint: a witness)."""
    for rank in range(WORLD):
        _round(port, rank).ledger.join(Member(rank, f"w{rank}", rank, 1, rank == 0),
                                       LinkEndpoint("127.0.0.1", 1000 + rank, "tok"))
    pod = _round(port, 0)
    pod.refresh()
    return pod


def test_a_pod_that_reaches_its_witnesses_names_the_silent_one_and_publishes_it(store_server: TCPStore) -> None:
    told: list[tuple[LostPod, ...]] = []
    pod = _joined(store_server.port)
    verdicts = _verdicts(pod, reached=WORLD, told=told)
    verdicts.learn_witnesses()
    found = verdicts.accuse({1: LostPod(1, "w1", 5)}, publish=True)
    assert found == {1: LostPod(1, "w1", 5)}
    verdicts.record(found)
    assert verdicts.declared() == (LostPod(1, "w1", 5),) and verdicts.is_declared(1) and verdicts.lost == {1}
    assert told == [(LostPod(1, "w1", 5),)]
    reader = _round(store_server.port, 2)
    reader.refresh()
    others = _verdicts(reader, reached=WORLD, told=[])
    others.take_published()  # another pod reads the verdict from the ledger, names it from its members
    assert [(peer.group_rank, peer.worker) for peer in others.declared()] == [(1, "w1")]


def test_a_pod_that_reaches_none_of_its_witnesses_is_the_one_cut_off_and_names_nobody(store_server: TCPStore) -> None:
    pod = _joined(store_server.port)
    verdicts = _verdicts(pod, reached=0, told=[])
    verdicts.learn_witnesses()
    assert verdicts.accuse({1: LostPod(1, "w1", 5)}, publish=True) == {}
    note = verdicts.cut_off_note()
    assert note is not None and note.startswith("This pod was cut off from its peers at ")
    assert verdicts.declared() == () and verdicts.accuse({}, publish=False) == {}
