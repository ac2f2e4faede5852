"""Forged values in the rendezvous store stop no watch, no heartbeat, no diagnosis and no agreement.

Real ``PeerWatch`` instances (each its own client) on a real ``TCPStore`` on loopback; a third
client plays the forger. Every reader of the peer watch and of the agreement is fed values that are
not what their keys hold: JSON nested thousands deep, the wrong types, oversized values, counters
that are no numbers or far too large, and a gap in the verdict log. Each test is bounded in time
(a hang fails it), and checks that the heartbeat threads still beat afterwards.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from rootcause_core.testimony import LostPeer
from rootcause_engine.agent.agreement import reach_agreement
from rootcause_engine.agent.diagnosis.agreed import PodWord, failure_to_json
from rootcause_engine.agent.peer_watch import PeerWatch
from rootcause_engine.agent.store_values import GAP_GRACE_S, VOID
from rootcause_engine.upstream.torch_elastic import JoinedRound
from testbed.sync import wait_until
from testbed.tcp_store import client
from tests.flyte2.test_agreed_report import ROOT, VICTIM_0

pytestmark = pytest.mark.timeout(120)

INTERVAL_S = 0.05
BOMB = b"[" * 100_000
DEEP_OBJECT = b'{"a":' * 20_000 + b"1" + b"}" * 20_000
HUGE = b"9" * (1 << 20)
#: How long a test waits for the pods to see each other or a verdict (on a busy machine too).
WAIT_S = 30.0


class Pod:
    """One pod's peer watch, and what its agent was told."""

    def __init__(self, port: int, rank: int, world: int, *, silence_s: float | None = 60.0,
                 hosts_store: bool = False) -> None:
        self.lost: list[tuple[float, tuple[LostPeer, ...]]] = []
        self.peer_failed = 0
        self.watch = PeerWatch(f"w{rank}", hosts_store=lambda: hosts_store, interval_s=INTERVAL_S,
                               lost_after_s=0.5, silence_limit_s=silence_s)
        self.watch.when_a_peer_is_lost(lambda peers: self.lost.append((time.monotonic(), peers)))
        self.watch.when_a_peer_fails(self._failed)
        self.watch.joined(JoinedRound(client(port), rank, world, (rank,)))

    def _failed(self) -> None:
        self.peer_failed += 1


def beats_on(port: int, ranks: list[int]) -> bool:
    """Each pod's heartbeat moves: its thread (and its store connection) survived what it read."""
    reader = client(port)
    before = [reader.get(f"rootcause/alive/{rank}") for rank in ranks]
    time.sleep(10 * INTERVAL_S)
    return all(reader.get(f"rootcause/alive/{rank}") != value for rank, value in zip(ranks, before, strict=True))


#: (key, value) written by the forger: pods 0 and 1 of 3 run, rank 2 never came, so its keys are
#: free for the forger (a stranger's keys are read the same way as a real pod's).
FORGERIES = {
    "member-bomb": [("rootcause/member/2", BOMB)],
    "member-deep-object": [("rootcause/member/2", DEEP_OBJECT)],
    "member-wrong-types": [("rootcause/member/2", b'[2, "w2", "0", 1, 0]')],
    "member-oversized": [("rootcause/member/2", b'[2, "' + b"w" * (1 << 20) + b'", 4, 1, 0]')],
    "member-not-utf8": [("rootcause/member/2", b"\xff\xfe[")],
    "store-host-bomb": [("rootcause/store-host", BOMB)],
    "heartbeat-bomb": [("rootcause/alive/2", BOMB)],
    "heartbeat-huge": [("rootcause/alive/2", HUGE)],
    "heartbeat-negative": [("rootcause/alive/2", b"-5")],
    "link-oversized": [("rootcause/link/2", b"tok 80 " + b"h" * (1 << 20))],
    "stall-bomb": [("rootcause/stalled/2", BOMB)],
    "stall-wrong-types": [("rootcause/stalled/2", b'{"pg": 0, "seq": "5"}')],
    "verdict-counter-not-a-number": [("rootcause/verdict-numbers", b"abc")],
    "verdict-counter-huge": [("rootcause/verdict-numbers", str(10**15).encode())],
    "verdict-counter-overflow": [("rootcause/verdict-numbers", b"9" * 40)],
    "verdict-counter-past-written": [("rootcause/verdict-numbers", b"131")],
    "verdict-bomb": [("rootcause/lost/1", BOMB), ("rootcause/verdict-numbers", b"1")],
    "verdict-wrong-types": [("rootcause/lost/1", b'["0", "w0", 5]'), ("rootcause/verdict-numbers", b"1")],
    "verdict-rank-outside": [("rootcause/lost/1", b'[7, "w7", 5]'), ("rootcause/verdict-numbers", b"1")],
    "verdict-not-a-list": [("rootcause/lost/1", b'{"0": 1}'), ("rootcause/verdict-numbers", b"1")],
    "failure-counter-not-a-number": [("rootcause/failures", b"abc")],
}


@pytest.mark.parametrize("forgery", FORGERIES.values(), ids=FORGERIES.keys())
def test_a_forged_value_is_ignored_by_every_reader_of_the_peer_watch(
    server_port: int, forgery: list[tuple[str, bytes]]
) -> None:
    forger = client(server_port)
    for key, value in forgery:
        forger.set(key, value)
    pods = [Pod(server_port, rank, 3) for rank in (0, 1)]
    try:
        assert wait_until(lambda: all(len(pod.watch.members()) == 2 for pod in pods), WAIT_S)
        time.sleep(20 * INTERVAL_S)  # twenty beats: every per-beat reader read the forged values
        assert beats_on(server_port, [0, 1])
        assert all(pod.watch._thread is not None and pod.watch._thread.is_alive() for pod in pods)
        assert [pod.lost for pod in pods] == [[], []] and [pod.peer_failed for pod in pods] == [0, 0]
        assert [m.group_rank for m in pods[0].watch.members()] == [0, 1]
        assert pods[0].watch.announced_stalls() == ()
        started = time.monotonic()
        # the failure path: rank 2 never beat, rank 1 does; the forged values change neither
        assert [peer.group_rank for peer in pods[0].watch.lost_peers()] == [2]
        assert time.monotonic() - started < 10
        pods[0].watch.announce_failure()  # a bump of a counter that is no count writes nothing, raises nothing
        assert beats_on(server_port, [0, 1])
    finally:
        for pod in pods:
            pod.watch.close()


def test_a_gap_in_the_verdict_log_delays_no_later_verdict(server_port: int) -> None:
    """A watcher that died between numbering its verdict and writing it: the verdict after it reaches
    every pod at the next beat, not after the gap's grace; the gap is voided after the grace."""
    forger = client(server_port)
    forger.add("rootcause/verdict-numbers", 1)  # number 1 taken, never written
    pods = [Pod(server_port, rank, 4, silence_s=1.0) for rank in range(4)]
    try:
        assert wait_until(lambda: all(len(pod.watch.members()) == 4 for pod in pods), WAIT_S)
        pods[2].watch.stop()  # frozen: its watcher (pod 1) declares it lost after the 1 s limit
        assert wait_until(lambda: all(pod.lost for pod in (pods[0], pods[1], pods[3])), WAIT_S)
        declared_at = pods[1].lost[0][0]  # the watcher records its own verdict as it writes it
        for pod in (pods[0], pods[3]):
            (when, (peer,)) = pod.lost[0]
            assert peer.group_rank == 2 and peer.worker == "w2"
            assert when - declared_at < GAP_GRACE_S / 2, "a later verdict waited for the gap"
        assert forger.get("rootcause/lost/2") != VOID
        assert wait_until(lambda: forger.check(["rootcause/lost/1"]) and forger.get("rootcause/lost/1") == VOID,
                          WAIT_S)
    finally:
        for pod in pods:
            pod.watch.close()


# --- the agreement -------------------------------------------------------------------------------

def _word_json(**changes: object) -> bytes:
    word = json.loads(PodWord("w1", (ROOT,)).to_json())
    word.update(changes)
    return json.dumps(word).encode()


WORD_FORGERIES = {
    "bomb": BOMB,
    "deep-object": DEEP_OBJECT,
    "oversized": b'{"format": 1, "worker": "' + b"w" * (5 << 20) + b'"}',
    "not-a-word": b"[1, 2, 3]",
    "time-a-string": _word_json(failures=[{**failure_to_json(ROOT), "timestamp_ns": "soon"}]),
    "rank-a-float": _word_json(failures=[{**failure_to_json(ROOT), "global_rank": 1.5}]),
    "role-unknown": _word_json(failures=[{**failure_to_json(ROOT), "role": "boss"}]),
    "failures-not-a-list": _word_json(failures={"a": 1}),
    "worker-a-number": _word_json(worker=5),
    "lost-wrong-types": _word_json(lost=[["1", 2, "x"]], failures=[{**failure_to_json(ROOT), "pid": "1"}]),
}


@pytest.mark.parametrize("forged", WORD_FORGERIES.values(), ids=WORD_FORGERIES.keys())
def test_a_forged_word_is_waited_past_and_the_pod_writes_a_report(server_port: int, forged: bytes) -> None:
    forger = client(server_port)
    forger.set("rootcause/agree/said/1", forged)
    pod = PeerWatch("w0", hosts_store=lambda: True, interval_s=INTERVAL_S, silence_limit_s=None)
    pod.joined(JoinedRound(client(server_port), 0, 2, (0,)))
    try:
        started = time.monotonic()
        report = reach_agreement(pod, PodWord("w0", (VICTIM_0,)), timeout_s=1.0)
        assert time.monotonic() - started < 10
        assert report.testified == ("w0",) and report.message.startswith("[victim] rank 0 ")
    finally:
        pod.close()


@pytest.mark.parametrize("forged", [BOMB, b'{"format": 1, "message": 5}', b"\xff"], ids=["bomb", "types", "bytes"])
def test_a_forged_decision_or_read_counter_leaves_each_pod_its_own_report(server_port: int, forged: bytes) -> None:
    forger = client(server_port)
    forger.set("rootcause/agree/decided", forged)
    forger.set("rootcause/agree/read", b"abc")  # the store's host reads it while it waits for the readers
    pods = [PeerWatch(f"w{rank}", hosts_store=lambda rank=rank: rank == 0, interval_s=INTERVAL_S,
                      silence_limit_s=None) for rank in range(2)]
    for rank, pod in enumerate(pods):
        pod.joined(JoinedRound(client(server_port), rank, 2, (rank,)))
    reports: list[object] = [None, None]
    words = [PodWord("w0", (VICTIM_0,)), PodWord("w1", (ROOT,))]
    try:
        threads = [threading.Thread(target=lambda i=i: reports.__setitem__(
            i, reach_agreement(pods[i], words[i], timeout_s=1.0))) for i in range(2)]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert time.monotonic() - started < 20
        assert [report.testified for report in reports] == [("w0",), ("w1",)]  # type: ignore[attr-defined]
        assert beats_on(server_port, [0, 1])
    finally:
        for pod in pods:
            pod.close()
