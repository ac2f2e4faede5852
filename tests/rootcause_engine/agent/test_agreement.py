"""The failing pods agree through a real c10d ``TCPStore`` on loopback (``agent/agreement.py``).

Each ``PeerWatch`` is one pod's agent with its own client connection, as in a job; each pod's
agreement runs on a thread of its own, as each pod's does in its own process.
"""

from __future__ import annotations

import threading
import time

from torch.distributed import TCPStore

from rootcause_core.testimony import LostPod
from rootcause_engine.agent.agreement import reach_agreement
from rootcause_engine.agent.diagnosis.agreed import AgreedReport, PodWord
from rootcause_engine.agent.peer_watch import PeerWatch
from rootcause_engine.upstream.torch_elastic import JoinedRound
from testbed.tcp_store import client, master_store
from tests.rootcause_engine.agent.diagnosis.test_agreed import ROOT, VICTIM_0, VICTIM_1


def pod(worker: str, store: TCPStore, rank: int, world: int, *, hosts_store: bool = False) -> PeerWatch:
    peers = PeerWatch(worker, hosts_store=lambda: hosts_store, interval_s=0.05, lost_after_s=None)
    peers.joined(JoinedRound(store, rank, world, (2 * rank, 2 * rank + 1)))
    return peers


def agree_on_threads(peers: list[PeerWatch], words: list[PodWord], timeout_s: float) -> list[AgreedReport]:
    reports: list[AgreedReport | None] = [None] * len(peers)

    def run(index: int) -> None:
        reports[index] = reach_agreement(peers[index], words[index], timeout_s=timeout_s)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(peers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout_s + 30)
    assert all(report is not None for report in reports)
    return reports  # type: ignore[return-value]


def test_every_failing_pod_takes_the_same_report_and_it_names_the_root_cause() -> None:
    store = master_store()
    peers = [pod("pod-0", store, 0, 2, hosts_store=True), pod("pod-1", client(store.port), 1, 2)]
    try:
        # the victim's pod speaks first, the root cause's pod second: the order must not matter
        reports = agree_on_threads(peers, [PodWord("pod-0", (VICTIM_0,)), PodWord("pod-1", (ROOT, VICTIM_1))], 10)
    finally:
        for watch in peers:
            watch.close()
    assert reports[0] == reports[1]
    assert reports[0].message.startswith("[root cause] rank 3 ") and reports[0].testified == ("pod-0", "pod-1")


def test_a_pod_whose_peer_never_speaks_writes_its_own_word_after_the_bounded_wait() -> None:
    store = master_store()
    alone = pod("pod-0", store, 0, 2, hosts_store=True)
    try:
        started = time.monotonic()
        report = reach_agreement(alone, PodWord("pod-0", (VICTIM_0,)), timeout_s=1.0)
        waited = time.monotonic() - started
    finally:
        alone.close()
    assert report.testified == ("pod-0",) and report.message.startswith("[victim] rank 0 ")
    assert 1.0 <= waited < 10


def test_a_pod_that_cannot_reach_the_store_writes_its_own_word_without_raising() -> None:
    store = master_store()
    cut_off = pod("pod-1", client(store.port), 1, 2)
    del store  # the store's host is gone: its server closes every connection
    try:
        started = time.monotonic()
        report = reach_agreement(cut_off, PodWord("pod-1", (ROOT,)), timeout_s=5.0)
        waited = time.monotonic() - started
    finally:
        cut_off.close()
    assert report.testified == ("pod-1",) and report.message.startswith("[root cause] rank 3 ")
    assert waited < 15


def test_a_pod_does_not_wait_for_a_peer_its_diagnosis_found_lost() -> None:
    store = master_store()
    survivor = pod("pod-0", store, 0, 2, hosts_store=True)
    word = PodWord("pod-0", (VICTIM_0,), (LostPod(1, "pod-1", None),))
    try:
        started = time.monotonic()
        report = reach_agreement(survivor, word, timeout_s=60.0)
        waited = time.monotonic() - started
    finally:
        survivor.close()
    assert report.message.startswith("[lost pod] ") and report.worker == "pod-1"
    assert waited < 30  # far below the 60 s bound: nobody was waited for
