"""Pods testify about each other through a real c10d ``TCPStore`` on loopback (``agent/peer_watch.py``).

Each ``PeerWatch`` is one pod's agent, with its own client connection to the store, as in a job.
No assertion depends on timing: a peer that stopped beating never beats again, and a live one
beats many times within the window the tests give it.
"""

from __future__ import annotations

import gc
import os
import signal
import threading
import time

import pytest
from torch.distributed import TCPStore

from rootcause_core.collectives import INIT_OP, CollectivePosition
from rootcause_core.testimony import LostPod, Member
from rootcause_engine.agent.peer_watch import PeerWatch
from rootcause_engine.upstream.torch_elastic import JoinedRound
from testbed.sync import wait_until
from testbed.tcp_store import client, master_store, store_in_process

INTERVAL_S = 0.05
#: Long against a heartbeat, so that a live peer on a busy machine is never taken for lost.
WINDOW_S = 5.0
#: How long a test waits for what one pod writes (its entry, a beat, a verdict) to reach another, on a
#: busy machine too; every wait ends as soon as it has.
PATIENCE_S = 60.0


def watch(worker: str, store: TCPStore, rank: int, world: int, *, hosts_store: bool = False,
          window_s: float = WINDOW_S) -> PeerWatch:
    peers = PeerWatch(worker, hosts_store=lambda: hosts_store, interval_s=INTERVAL_S, failure_look_s=window_s)
    peers.joined(JoinedRound(store, rank, world, tuple(range(2 * rank, 2 * rank + 2))))
    return peers


def wait_for_members(peers: PeerWatch, count: int) -> tuple[Member, ...]:
    wait_until(lambda: len(peers.members()) >= count, PATIENCE_S)
    return peers.members()


def test_every_pod_learns_the_membership_the_rendezvous_formed(server_port: int) -> None:
    pods = [watch(f"train-worker-{r}", client(server_port), r, 3, hosts_store=r == 0) for r in range(3)]
    try:
        expected = (
            Member(0, "train-worker-0", 0, 2, True),
            Member(1, "train-worker-1", 2, 2, False),
            Member(2, "train-worker-2", 4, 2, False),
        )
        for pod in pods:
            assert wait_for_members(pod, 3) == expected
    finally:
        for pod in pods:
            pod.stop()


def test_live_peers_and_peers_that_announced_a_failure_are_not_lost(server_port: int) -> None:
    survivor, alive, failing = (watch(f"w{r}", client(server_port), r, 3) for r in range(3))
    try:
        wait_for_members(survivor, 3)
        failing.failures.announce()
        failing.stop()  # it reported its failure, then exited: it writes its own error file
        assert survivor.lost_pods.search() == ()
    finally:
        for pod in (survivor, alive, failing):
            pod.stop()


def test_a_peer_that_stops_beating_without_a_word_is_lost_and_last_seen_at_its_last_beat(server_port: int) -> None:
    survivor, other, vanished = (watch(f"w{r}", client(server_port), r, 3, window_s=1.0) for r in range(3))
    try:
        wait_for_members(survivor, 3)
        before = time.time_ns()
        vanished.stop()  # as if its pod were killed: no announcement, no more heartbeats
        after = time.time_ns()
        survivor_says = survivor.lost_pods.search()
        assert [(p.group_rank, p.worker) for p in survivor_says] == [(2, "w2")]
        last_seen = survivor_says[0].last_seen_ns
        assert last_seen is not None and last_seen <= after and last_seen > before - 60 * 10**9
    finally:
        for pod in (survivor, other, vanished):
            pod.stop()


def test_when_the_store_goes_its_host_is_the_one_peer_named() -> None:
    server = master_store()
    port = server.port
    # the store's host pod (group rank 0) and two other pods, each its own client
    pods = [watch(f"train-worker-{r}", client(port), r, 3, hosts_store=r == 0) for r in range(3)]
    survivor = pods[1]
    try:
        wait_for_members(survivor, 3)
        del server  # the pod hosting the store vanishes, store and all: every connection is closed
        gc.collect()
        gone_at = time.time_ns()
        lost = survivor.lost_pods.search()
        assert [(p.group_rank, p.worker) for p in lost] == [(0, "train-worker-0")]
        assert lost[0].last_seen_ns is not None and lost[0].last_seen_ns <= gone_at  # the store's last answer
        survivor.failures.announce()  # never raises, store or not
    finally:
        for pod in pods:
            pod.stop()


def test_a_member_that_publishes_late_is_learned_long_before_the_next_heartbeat(server_port: int) -> None:
    """The store's host can be lost within a heartbeat of publishing its entry (its workers fail
    fast); a peer that had not read the entry by then could not name it. So a peer looks again for
    members it does not know at a short interval, not at its (here two-minute) heartbeat."""
    slow = PeerWatch("train-worker-1", interval_s=120.0, failure_look_s=WINDOW_S)
    slow.joined(JoinedRound(client(server_port), 1, 2, (2, 3)))
    reader = client(server_port)
    # the peer's first look (at its first heartbeat) found no rank 0 yet
    wait_until(lambda: reader.check(["rootcause/alive/1"]), PATIENCE_S, interval_s=0.01)
    host = watch("train-worker-0", client(server_port), 0, 2, hosts_store=True)
    try:
        assert [m.worker for m in wait_for_members(slow, 2)] == ["train-worker-0", "train-worker-1"]
    finally:
        host.stop()
        slow.stop()


def test_a_member_that_never_publishes_keeps_only_itself_unknown(server_port: int) -> None:
    """Entries are read in chunks, one call each; a chunk with an entry missing at two looks is
    split, so the pod lost before it published hides no other member."""
    watches = [watch(f"train-worker-{rank}", client(server_port), rank, 6) for rank in (0, 1, 2, 4, 5)]
    try:
        for peers in watches:
            assert [m.group_rank for m in wait_for_members(peers, 5)] == [0, 1, 2, 4, 5]
    finally:
        for peers in watches:
            peers.stop()


def test_a_pod_alone_starts_no_thread_and_knows_itself(server_port: int) -> None:
    import threading

    alone = watch("w0", client(server_port), 0, 1)
    assert not any(t.name == "rootcause-peer-watch" for t in threading.enumerate())
    assert alone.members() == (Member(0, "w0", 0, 2, False),) and alone.lost_pods.search() == ()
    assert alone.failures.stalls(wait_s=60) == ()  # nobody to announce one: no wait
    alone.failures.done()
    alone.stop()


def test_no_store_client_thread_outlives_its_round_or_the_launch(server_port: int) -> None:
    """A process that runs launches one after another (a notebook, a test run) keeps no idle thread per launch."""
    before = set(threading.enumerate())
    store = client(server_port)
    peers = watch("w0", store, 0, 2)
    other = watch("w1", client(server_port), 1, 2)
    first_round = [t for t in set(threading.enumerate()) - before if t.name == "rootcause-store-client"]
    assert len(first_round) == 2  # one per pod's round
    peers.joined(JoinedRound(store, 0, 2, (0, 1)))  # a new round (a restart) replaces the first
    for peer_watch in (peers, other):
        peer_watch.finish()
        peer_watch.close()
    for thread in set(threading.enumerate()) - before:
        thread.join(timeout=30)
    assert not [t for t in set(threading.enumerate()) - before if t.name == "rootcause-store-client"]


def test_without_a_round_there_is_nothing_to_say() -> None:
    peers = PeerWatch("w0")
    peers.failures.announce()
    peers.failures.done()
    assert peers.failures.stalls(wait_s=60) == () and peers.members() == ()
    assert peers.lost_pods.search() == () and peers.lost_pods.declared() == ()
    peers.stop()


def test_lost_pod_entries_are_what_the_testimony_carries(server_port: int) -> None:
    survivor, vanished = (watch(f"w{r}", client(server_port), r, 2, window_s=0.5) for r in range(2))
    try:
        wait_for_members(survivor, 2)
        vanished.stop()
        (lost,) = survivor.lost_pods.search()
        assert isinstance(lost, LostPod) and lost.entry()[:2] == [1, "w1"]
    finally:
        survivor.stop()


def test_a_peer_s_failure_announcement_reaches_the_others_once_with_its_stalled_collective(server_port: int) -> None:
    """A pod whose workers timed out says in which collective; every other pod's heartbeat thread calls
    its agent back once (a pod whose rank hangs would otherwise never fail), never for its own."""
    calls: dict[str, int] = {"w0": 0, "w1": 0, "w2": 0}
    pods = [watch(f"w{r}", client(server_port), r, 3) for r in range(3)]
    try:
        for pod in pods:
            pod.when_a_peer_fails(lambda name=pod.worker: calls.__setitem__(name, calls[name] + 1))
        stalled = CollectivePosition("0", 5, "gloo:all_reduce", 123)
        pods[2].failures.announce(stalled)
        wait_until(lambda: calls["w0"] > 0 and calls["w1"] > 0, PATIENCE_S)
        time.sleep(10 * INTERVAL_S)  # more beats: still once each
        assert calls == {"w0": 1, "w1": 1, "w2": 0}
        assert pods[0].failures.stalls() == (stalled,) and pods[2].failures.stalls() == ()
        pods[1].failures.announce()  # a failure with no timeout announces no collective
        assert pods[0].failures.stalls() == (stalled,)
        # a stalled initialisation travels with the ranks its peers waited for
        init = CollectivePosition("0", 0, INIT_OP, 99, (1,))
        pods[1].failures.announce(init)
        assert pods[0].failures.stalls() == (init, stalled)
    finally:
        for pod in pods:
            pod.stop()


def test_a_pod_may_wait_for_a_stall_a_peer_announces_later(server_port: int) -> None:
    """A pod that saw only victims may wait for a peer's stall (its timeout can come later than the
    victims' errors: gloo closes a pair that timed out); the wait ends with the stall."""
    pods = [watch(f"w{r}", client(server_port), r, 3) for r in range(3)]
    try:
        stalled = CollectivePosition("0", 7, "recv", 456, (0,))
        later = threading.Timer(0.3, lambda: pods[2].failures.announce(stalled))
        later.start()
        assert pods[0].failures.stalls() == ()  # not yet
        assert pods[0].failures.stalls(wait_s=60) == (stalled,)
        later.join()
    finally:
        for pod in pods:
            pod.stop()


def test_the_wait_for_a_stall_ends_once_every_peer_announced_its_failure(server_port: int) -> None:
    """Every pod announced its failure and none a stall: nothing more can come, so no wait."""
    pods = [watch(f"w{r}", client(server_port), r, 3) for r in range(3)]
    try:
        for pod in pods:
            pod.failures.announce()
        # with no stall announced and every pod failed, nothing more can come: an hour is not waited
        done = threading.Event()
        result: list[tuple[CollectivePosition, ...]] = []
        thread = threading.Thread(target=lambda: (result.append(pods[0].failures.stalls(wait_s=3600)), done.set()))
        thread.start()
        assert done.wait(60) and result == [()]
    finally:
        for pod in pods:
            pod.stop()


def test_the_store_host_leaves_only_after_its_peers_are_done(server_port: int) -> None:
    """The store dies with its host: the host waits for every peer's "done" (bounded), so a peer still
    searching for lost pods never finds the store gone and the host taken for lost."""
    # a bound (the window) far beyond the test, so only the peer's "done" can end the wait
    host = watch("w0", client(server_port), 0, 2, hosts_store=True, window_s=120.0)
    peer = watch("w1", client(server_port), 1, 2)
    try:
        left = threading.Event()
        leaving = threading.Thread(target=lambda: (host.failures.done(), left.set()))
        leaving.start()
        assert not left.wait(timeout=0.5)  # the peer has not said it is done
        peer.failures.done()
        assert left.wait(timeout=60)
        leaving.join()
    finally:
        host.stop()
        peer.stop()


def test_the_store_host_does_not_wait_forever_for_a_peer_that_never_finishes(server_port: int) -> None:
    host = watch("w0", client(server_port), 0, 2, hosts_store=True, window_s=0.2)
    silent = watch("w1", client(server_port), 1, 2)
    try:
        host.failures.done()  # returns after the bound: the peer may be gone for good
    finally:
        host.stop()
        silent.stop()


def test_the_store_host_does_not_wait_for_a_peer_it_found_lost(server_port: int) -> None:
    host = watch("w0", client(server_port), 0, 2, hosts_store=True, window_s=5.0)
    vanished = watch("w1", client(server_port), 1, 2)
    try:
        wait_for_members(host, 2)
        vanished.stop()  # no more beats, no announcement: lost
        assert [peer.group_rank for peer in host.lost_pods.search()] == [1]
        started = time.monotonic()
        host.failures.done()
        # waiting for the lost pod would take the whole 5 s window; not waiting, one store write
        assert time.monotonic() - started < 4.0
    finally:
        host.stop()
        vanished.stop()


# --- liveness while the job is healthy (a frozen node closes no socket) ---------------------------------

SILENCE_S = 1.0


def _healthy_watch(worker: str, store: TCPStore, rank: int, world: int, *, silence_s: float = SILENCE_S,
                   hosts_store: bool = False) -> tuple[PeerWatch, list[tuple[LostPod, ...]]]:
    """A pod whose watch declares silent peers lost; the list collects what its agent was told."""
    told: list[tuple[LostPod, ...]] = []
    peers = PeerWatch(worker, hosts_store=lambda: hosts_store, interval_s=INTERVAL_S, failure_look_s=WINDOW_S,
                      lost_after_s=silence_s, store_timeout_s=silence_s)
    peers.when_a_peer_is_lost(told.append)
    peers.joined(JoinedRound(store, rank, world, (rank,)))
    return peers, told


def test_a_peer_that_goes_silent_while_all_is_well_is_declared_lost_and_every_pod_is_told(server_port: int) -> None:
    """Nothing fails (the frozen pod's sockets stay open): its watcher (the pod before it) declares it
    lost after the silence limit, and every other pod learns the verdict from the store."""
    pods = [_healthy_watch(f"w{r}", client(server_port), r, 4) for r in range(4)]
    try:
        for peers, _ in pods:
            wait_for_members(peers, 4)
        pods[2][0].stop()  # frozen: no announcement, no "done", no more heartbeats
        for rank in (0, 1, 3):
            assert wait_until(lambda told=pods[rank][1]: bool(told), PATIENCE_S), f"pod {rank} was never told"
            (lost,) = pods[rank][1][0]
            assert (lost.group_rank, lost.worker) == (2, "w2") and lost.last_seen_ns is not None
        assert pods[3][0].lost_pods.declared() == pods[3][1][0]
        assert pods[0][0].lost_pods.search() == (pods[0][1][0][0],)  # at once: the verdict, no new watch
    finally:
        for peers, _ in pods:
            peers.stop()


def test_two_silent_neighbours_are_both_found_the_watcher_moves_past_the_first(server_port: int) -> None:
    pods = [_healthy_watch(f"w{r}", client(server_port), r, 4) for r in range(4)]
    try:
        for peers, _ in pods:
            wait_for_members(peers, 4)
        pods[1][0].stop()
        pods[2][0].stop()  # pod 1 watched pod 2: once pod 1 is lost, pod 0 watches pod 2
        assert wait_until(
            lambda: {p.group_rank for p in pods[3][0].lost_pods.search()} == {1, 2} if pods[3][1] else False,
            PATIENCE_S)
    finally:
        for peers, _ in pods:
            peers.stop()


def test_peers_that_finished_failed_or_only_beat_slowly_are_never_declared_lost(server_port: int) -> None:
    """A pod done with the round, one that announced its failure, and one whose beats come at a third
    of the silence limit (a starved agent): several silence limits later, no verdict anywhere."""
    pods = [_healthy_watch(f"w{r}", client(server_port), r, 4, silence_s=3.0) for r in range(3)]
    slow = PeerWatch("w3", interval_s=1.0, failure_look_s=WINDOW_S, lost_after_s=3.0)
    slow.joined(JoinedRound(client(server_port), 3, 4, (3,)))
    try:
        for peers, _ in pods:
            wait_for_members(peers, 4)
        pods[1][0].finish()
        pods[2][0].failures.announce()
        pods[2][0].stop()
        time.sleep(3 * 3.0)
        assert [told for _, told in pods] == [[], [], []]
    finally:
        for peers, _ in pods:
            peers.stop()
        slow.stop()


def test_a_pod_never_seen_alive_after_the_rendezvous_is_declared_lost(server_port: int) -> None:
    """Frozen between the rendezvous and its first heartbeat: no member entry, no beat, ever."""
    pods = [_healthy_watch(f"w{r}", client(server_port), r, 3) for r in (0, 2)]
    try:
        assert wait_until(lambda: bool(pods[0][1]), PATIENCE_S)
        (lost,) = pods[0][1][0]
        assert (lost.group_rank, lost.last_seen_ns) == (1, None)
    finally:
        for peers, _ in pods:
            peers.stop()


@pytest.mark.slow
def test_when_the_store_s_host_freezes_each_pod_names_it_on_its_own() -> None:
    """The store freezes with its host: every store call times out (``BoundedStore``), and after the
    silence limit each pod declares the store's host lost without the store's help."""
    with store_in_process() as (server, port):
        pods = [_healthy_watch(f"w{r}", client(port), r, 3, hosts_store=r == 0) for r in range(3)]
        for peers, _ in pods:
            wait_for_members(peers, 3)
        os.kill(server.pid, signal.SIGSTOP)  # the store host's node freezes (its watch is frozen with it)
        pods[0][0].stop()
        for rank in (1, 2):
            assert wait_until(lambda told=pods[rank][1]: bool(told), PATIENCE_S), (
                f"pod {rank} never named the store host")
            assert [(p.group_rank, p.worker) for p in pods[rank][1][0]] == [(0, "w0")]
        for peers, _ in pods:
            peers.stop()
