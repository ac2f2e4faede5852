"""Forged values in the rendezvous store stop no watch, no heartbeat, no diagnosis and no agreement.

Real ``PeerWatch`` instances (each its own client) on a real ``TCPStore`` on loopback; a third
client plays the forger. Every reader of the peer watch and of the agreement is fed values that are
not what their keys hold: JSON nested thousands deep, the wrong types, oversized values, counters
that are no numbers or far too large, events that are not ones, and gaps in the round's ledger.
Each test is bounded in time (a hang fails it), and checks that the heartbeat threads still beat
afterwards.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from rootcause_core.testimony import LostPod
from rootcause_engine.agent.agreement import reach_agreement
from rootcause_engine.agent.diagnosis.agreed import PodWord, failure_to_json
from rootcause_engine.agent.peer_watch import PeerWatch
from rootcause_engine.agent.store_values import GAP_GRACE_S, VOID
from rootcause_engine.upstream.torch_elastic import JoinedRound
from testbed.sync import wait_until
from testbed.tcp_store import client
from tests.rootcause_engine.agent.diagnosis.test_agreed import ROOT, VICTIM_0

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
        self.lost: list[tuple[float, tuple[LostPod, ...]]] = []
        self.peer_failed = 0
        self.watch = PeerWatch(f"w{rank}", hosts_store=lambda: hosts_store, interval_s=INTERVAL_S,
                               failure_look_s=0.5, lost_after_s=silence_s)
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


EVENTS = "rootcause/events"


def forge_event(forger: object, entry: bytes) -> None:
    """Append ``entry`` to the round's ledger as a writer would: number it, then write it."""
    number = forger.add(f"{EVENTS}/len", 1)  # type: ignore[attr-defined]
    forger.set(f"{EVENTS}/{number}", entry)  # type: ignore[attr-defined]


def _event(kind: str, rank: object, data: object = None, **extra: object) -> bytes:
    return json.dumps({"kind": kind, "rank": rank, "name": "w2", "time_ns": 1, "data": data, **extra}).encode()


#: Events forged into the round's ledger before the pods join: pods 0 and 1 of 3 run, rank 2 never
#: came, so whatever is said of it is the forger's (a stranger's events are read as a real pod's).
EVENT_FORGERIES = {
    "bomb": BOMB,
    "deep-object-within-the-size": b'{"a":' * 3000 + b"1" + b"}" * 3000,
    "oversized": _event("join", 2, {"member": [2, "w" * (1 << 20), 4, 1, 0]}),
    "not-utf8": b"\xff\xfe[",
    "not-an-object": b"[1, 2, 3]",
    "kind-unknown": _event("promote", 2),
    "rank-a-string": _event("join", "2", {"member": [2, "w2", 4, 1, 0]}),
    "rank-outside": _event("join", 7, {"member": [7, "w7", 4, 1, 0]}),
    "rank-a-bool": _event("failed", True),
    "time-negative": _event("join", 2, {"member": [2, "w2", 4, 1, 0]}, time_ns=-5),
    "member-wrong-types": _event("join", 2, {"member": [2, "w2", "0", 1, 0]}),
    "member-of-another-rank": _event("join", 2, {"member": [0, "w0", 0, 1, 1]}),
    "member-a-dict": _event("join", 2, {"member": {"rank": 2}}),
    "link-oversized": _event("join", 2, {"member": [2, "w2", 4, 1, 0], "link": "tok 80 " + "h" * 10_000}),
    "data-a-list": _event("join", 2, [1, 2]),
    "verdict-time-a-string": _event("lost", 2, {"last_seen_ns": "soon"}),
    "verdict-rank-outside": _event("lost", 9, {"last_seen_ns": 5}),
    "verdict-data-a-string": _event("lost", 5, "abc"),
}


@pytest.mark.parametrize("forged", EVENT_FORGERIES.values(), ids=EVENT_FORGERIES.keys())
def test_a_forged_event_is_ignored_by_every_reader_of_the_ledger(server_port: int, forged: bytes) -> None:
    forger = client(server_port)
    forge_event(forger, forged)
    pods = [Pod(server_port, rank, 3) for rank in (0, 1)]
    try:
        assert wait_until(lambda: all(len(pod.watch.members()) >= 2 for pod in pods), WAIT_S)
        time.sleep(20 * INTERVAL_S)  # twenty beats: every per-beat reader read the forged values
        assert beats_on(server_port, [0, 1])
        assert all((current := pod.watch._current()) is not None and current.beat.running for pod in pods)
        # a join whose only fault is its link endpoint makes rank 2 a member without a link
        assert [m.group_rank for m in pods[0].watch.members()] == ([0, 1, 2] if b'"link"' in forged else [0, 1])
        assert pods[0].watch.failures.stalls() == ()
        # a verdict on rank 2 (that never came) tells the pods it is lost; any other is refused
        named = [peer.group_rank for _, peers in pods[0].lost for peer in peers]
        assert named in ([], [2]) and [pod.peer_failed for pod in pods] == [0, 0]
        started = time.monotonic()
        # the failure path: rank 2 never beat, rank 1 does; the forged values change neither
        assert [peer.group_rank for peer in pods[0].watch.lost_pods.search()] == [2]
        assert time.monotonic() - started < 10
        pods[0].watch.failures.announce()
        assert wait_until(lambda: pods[1].peer_failed == 1, WAIT_S)
        assert beats_on(server_port, [0, 1])
    finally:
        for pod in pods:
            pod.watch.close()


#: Heartbeats forged for rank 2 (that never came): no beat, so rank 2 is still lost.
HEARTBEAT_FORGERIES = {"bomb": BOMB, "huge": HUGE, "negative": b"-5", "not-a-number": b"soon"}


@pytest.mark.parametrize("forged", HEARTBEAT_FORGERIES.values(), ids=HEARTBEAT_FORGERIES.keys())
def test_a_forged_heartbeat_is_no_beat(server_port: int, forged: bytes) -> None:
    client(server_port).set("rootcause/alive/2", forged)
    pods = [Pod(server_port, rank, 3) for rank in (0, 1)]
    try:
        assert wait_until(lambda: all(len(pod.watch.members()) == 2 for pod in pods), WAIT_S)
        time.sleep(20 * INTERVAL_S)
        assert beats_on(server_port, [0, 1]) and [pod.lost for pod in pods] == [[], []]
        assert [peer.group_rank for peer in pods[0].watch.lost_pods.search()] == [2]
    finally:
        for pod in pods:
            pod.watch.close()


#: A failure announced for rank 2 with a stalled collective that is not one.
STALL_FORGERIES = {
    "deep": _event("failed", 2, json.loads('{"a":' * 10 + "1" + "}" * 10)),
    "wrong-types": _event("failed", 2, {"pg": 0, "seq": "5"}),
    "a-list": _event("failed", 2, [0, 5]),
}


@pytest.mark.parametrize("forged", STALL_FORGERIES.values(), ids=STALL_FORGERIES.keys())
def test_a_forged_stall_is_left_out_and_its_failure_still_counts(server_port: int, forged: bytes) -> None:
    forge_event(client(server_port), forged)
    pods = [Pod(server_port, rank, 3) for rank in (0, 1)]
    try:
        assert wait_until(lambda: all(pod.peer_failed == 1 for pod in pods), WAIT_S)
        assert pods[0].watch.failures.stalls() == ()
        assert [peer.group_rank for peer in pods[0].watch.lost_pods.search()] == []  # it failed: not lost
        assert beats_on(server_port, [0, 1])
    finally:
        for pod in pods:
            pod.watch.close()


#: The ledger's counter forged: no count, far too large, past the int64 range, another script's
#: digit (``int`` reads the Arabic-Indic three as 3; torch's server does not, and closes the
#: connection of a client that adds to it), negative, signed.
COUNTER_FORGERIES = {"not-a-number": b"abc", "huge": str(10**15).encode(), "overflow": b"9" * 40,
                     "arabic-indic-digit": "\u0663".encode(), "negative": b"-5", "signed": b"+1"}


@pytest.mark.parametrize("forged", COUNTER_FORGERIES.values(), ids=COUNTER_FORGERIES.keys())
def test_a_forged_ledger_counter_costs_the_counter_and_nothing_else(server_port: int, forged: bytes) -> None:
    """The first pod to meet it sets it to the count of the entries written (logged): the joins and a
    failure announcement land, the heartbeats go on, no pod is declared lost, and the failure
    path still finds the pod that never beat, by its heartbeat."""
    client(server_port).set(f"{EVENTS}/len", forged)
    pods = [Pod(server_port, rank, 3) for rank in (0, 1)]
    try:
        assert wait_until(lambda: all(len(pod.watch.members()) == 2 for pod in pods), WAIT_S)
        assert beats_on(server_port, [0, 1]) and [pod.lost for pod in pods] == [[], []]
        assert all((current := pod.watch._current()) is not None and current.beat.running for pod in pods)
        assert [peer.group_rank for peer in pods[0].watch.lost_pods.search()] == [2]
        pods[0].watch.failures.announce()
        assert wait_until(lambda: pods[1].peer_failed == 1, WAIT_S)
        assert beats_on(server_port, [0, 1])
        assert client(server_port).get(f"{EVENTS}/len") == b"3"  # two joins and a failure
    finally:
        for pod in pods:
            pod.watch.close()


def test_a_ledger_counter_forged_past_what_was_written_delays_the_ledger_by_the_grace(server_port: int) -> None:
    """131 numbers taken, none written: every gap is voided after the grace, and the events after
    them (the pods' joins) are read meanwhile."""
    client(server_port).set(f"{EVENTS}/len", b"131")
    pods = [Pod(server_port, rank, 3) for rank in (0, 1)]
    try:
        assert wait_until(lambda: all(len(pod.watch.members()) == 2 for pod in pods), WAIT_S)
        assert beats_on(server_port, [0, 1]) and [pod.lost for pod in pods] == [[], []]
        assert [peer.group_rank for peer in pods[0].watch.lost_pods.search()] == [2]
    finally:
        for pod in pods:
            pod.watch.close()


def test_a_gap_in_the_ledger_delays_no_later_verdict(server_port: int) -> None:
    """A watcher that died between numbering its verdict and writing it: the verdict after it reaches
    every pod at the next beat, not after the gap's grace; the gap is voided after the grace."""
    forger = client(server_port)
    forger.add(f"{EVENTS}/len", 1)  # number 1 taken, never written
    pods = [Pod(server_port, rank, 4, silence_s=1.0) for rank in range(4)]
    try:
        assert wait_until(lambda: all(len(pod.watch.members()) == 4 for pod in pods), WAIT_S)
        # past the grace of the join-time gap, so that only the verdict's timing is measured
        assert wait_until(lambda: forger.get(f"{EVENTS}/1") == VOID, WAIT_S)
        forger.add(f"{EVENTS}/len", 1)  # another number taken and never written, right before the verdict
        pods[2].watch.stop()  # frozen: its watcher (pod 1) declares it lost after the 1 s limit
        assert wait_until(lambda: all(pod.lost for pod in (pods[0], pods[1], pods[3])), WAIT_S)
        declared_at = pods[1].lost[0][0]  # the watcher records its own verdict as it writes it
        for pod in (pods[0], pods[3]):
            (when, (peer,)) = pod.lost[0]
            assert peer.group_rank == 2 and peer.worker == "w2"
            assert when - declared_at < GAP_GRACE_S / 2, "a later verdict waited for the gap"
        gap = 6  # 1 voided, 2 to 5 the joins, 6 the second gap
        assert wait_until(lambda: forger.get(f"{EVENTS}/{gap}") == VOID, WAIT_S)
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
    forge_event(forger, _event("said", 1))  # its word is in the store: read it
    pod = PeerWatch("w0", hosts_store=lambda: True, interval_s=INTERVAL_S, lost_after_s=None)
    pod.joined(JoinedRound(client(server_port), 0, 2, (0,)))
    try:
        started = time.monotonic()
        report = reach_agreement(pod, PodWord("w0", (VICTIM_0,)), timeout_s=1.0)
        assert time.monotonic() - started < 10
        assert report.testified == ("w0",) and report.message.startswith("[victim] rank 0 ")
    finally:
        pod.close()


@pytest.mark.parametrize("forged", [BOMB, b'{"format": 1, "message": 5}', b"\xff"], ids=["bomb", "types", "bytes"])
def test_a_forged_decision_leaves_each_pod_its_own_report(server_port: int, forged: bytes) -> None:
    forger = client(server_port)
    forger.set("rootcause/agree/decided", forged)
    pods = [PeerWatch(f"w{rank}", hosts_store=lambda rank=rank: rank == 0, interval_s=INTERVAL_S,
                      lost_after_s=None) for rank in range(2)]
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
