"""A watched pod whose processes end is found by its watcher's link at once (``agent/peer_link.py``).

The watched pod is a real process (its own agent's ``PeerWatch``, its own store client), killed with a
real signal; the silence limit is a minute, so a verdict within the test's wait can only come from the
link. A pod that said it was done, a frozen one and a forked worker's exit give no verdict; nor does a
link the network cuts while the pod lives, its heartbeat going on or not: a closed link is evidence,
and a pod whose agent answers a new connection is alive.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from torch.distributed import PrefixStore

from rootcause_core.testimony import LostPod
from rootcause_engine.agent.peer_link import LinkEndpoint, link_hub
from rootcause_engine.agent.peer_watch import PeerWatch, store_address
from rootcause_engine.upstream.torch_elastic import JoinedRound
from testbed.sync import wait_until
from testbed.tcp_store import client

INTERVAL_S = 0.05
#: Far longer than any wait below: a verdict before it is the link's.
SILENCE_S = 60.0
#: How long a test waits for a verdict the link gives within milliseconds.
VERDICT_WAIT_S = 30.0
#: A few dozen heartbeats: long enough for a wrong verdict to show, on a busy machine too.
QUIET_S = 2.0

#: The watched pod: the last rank (of 2 unless argv says), with its own PeerWatch; on stdin, "finish"
#: says it is done and exits, "fork" starts a forked child that outlives the pod, "cut" shuts down its
#: end of every link its watchers hold (as a proxy's idle timeout or a conntrack flush ends them:
#: the process lives on), "stop" stops its heartbeat (the process lives on), "fail" announces that its
#: workers failed; it prints "ready" once joined, and answers "cut", "stop" and "fail" once done.
_POD = """
import datetime, os, socket, sys, time
from torch.distributed import TCPStore
from rootcause_engine.agent.peer_link import link_hub
from rootcause_engine.agent.peer_watch import PeerWatch
from rootcause_engine.upstream.torch_elastic import JoinedRound
store = TCPStore("127.0.0.1", int(sys.argv[1]), is_master=False, timeout=datetime.timedelta(seconds=10),
                 wait_for_workers=False)
world = int(sys.argv[2]) if len(sys.argv) > 2 else 2
peers = PeerWatch(f"pod-{world - 1}", interval_s=0.05, lost_after_s=60.0)
peers.joined(JoinedRound(store, world - 1, world, (world - 1,)))
print("ready", flush=True)
for line in sys.stdin:
    if line.strip() == "finish":
        peers.finish()
        peers.close()
        sys.exit(0)
    if line.strip() == "fork":
        child = os.fork()
        if child == 0:
            time.sleep(600)
            os._exit(0)
        print(child, flush=True)
    if line.strip() == "cut":
        for conn in list(link_hub()._accepted):
            conn.shutdown(socket.SHUT_RDWR)
        print("cut", flush=True)
    if line.strip() == "stop":
        peers.stop()
        print("stop", flush=True)
    if line.strip() == "fail":
        peers.failures.announce()
        print("fail", flush=True)
"""


@pytest.fixture
def watched_pod(server_port: int) -> Iterator[subprocess.Popen[str]]:
    pod = subprocess.Popen([sys.executable, "-c", _POD, str(server_port)], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    assert pod.stdout is not None and pod.stdout.readline().strip() == "ready"
    yield pod
    if pod.poll() is None:
        os.kill(pod.pid, signal.SIGCONT)
        pod.kill()
    pod.wait()


def _watcher(port: int, rank: int = 0, world: int = 2, *,
             failure_look_s: float = 2.0) -> tuple[PeerWatch, list[tuple[LostPod, ...]]]:
    told: list[tuple[LostPod, ...]] = []
    store = client(port)
    peers = PeerWatch(f"pod-{rank}", interval_s=INTERVAL_S, lost_after_s=SILENCE_S, failure_look_s=failure_look_s)
    peers.when_a_peer_is_lost(told.append)
    peers.joined(JoinedRound(store, rank, world, (rank,)))
    return peers, told


def _linked(peers: PeerWatch) -> bool:
    """The watcher's link to its successor is made (greeted)."""
    current = peers._current()
    return current is not None and current.link is not None and current.link.established


def _send(pod: subprocess.Popen[str], line: str) -> None:
    assert pod.stdin is not None
    pod.stdin.write(line + "\n")
    pod.stdin.flush()


def _ask(pod: subprocess.Popen[str], line: str) -> None:
    """Send ``line`` and wait for the pod's answer (it echoes the command once done)."""
    _send(pod, line)
    assert pod.stdout is not None and pod.stdout.readline().strip() == line


def test_a_link_the_network_cuts_while_the_heartbeat_goes_on_is_no_verdict_and_is_made_again(
    server_port: int, watched_pod: subprocess.Popen[str]
) -> None:
    """One reset of the link (the pod lives, its heartbeat moves): logged, made again, no verdict.
    Then the heartbeat stops and the link is cut again while its agent lives: the watcher asks it
    directly, it answers, no verdict. Its processes killed: the verdict comes within a few beats."""
    peers, told = _watcher(server_port)
    try:
        assert wait_until(lambda: _linked(peers), VERDICT_WAIT_S)
        first = peers._current().link  # type: ignore[union-attr]
        _ask(watched_pod, "cut")
        assert wait_until(lambda: first.closed, VERDICT_WAIT_S)  # type: ignore[union-attr]
        assert wait_until(lambda: _linked(peers) and peers._current().link is not first,  # type: ignore[union-attr]
                          VERDICT_WAIT_S), "the cut link was not made again"
        time.sleep(QUIET_S)
        assert told == []
        _ask(watched_pod, "stop")  # the heartbeat ends; the link alone is still no verdict
        time.sleep(QUIET_S)
        assert told == []
        _ask(watched_pod, "cut")  # both signs, but its agent still answers a new connection: asked, alive
        time.sleep(QUIET_S)
        assert told == []
        watched_pod.kill()  # now its processes ended: the link closes and its port refuses
        started = time.monotonic()
        assert wait_until(lambda: bool(told), VERDICT_WAIT_S), "no verdict once both the link and the beat ended"
        assert time.monotonic() - started < VERDICT_WAIT_S / 3  # a few beats, far from the 60 s silence limit
        (lost,) = told[0]
        assert (lost.group_rank, lost.worker) == (1, "pod-1") and lost.last_seen_ns is not None
    finally:
        peers.stop()


def test_a_pod_whose_processes_are_killed_is_declared_lost_long_before_the_silence_limit(
    server_port: int, watched_pod: subprocess.Popen[str]
) -> None:
    peers, told = _watcher(server_port)
    try:
        assert wait_until(lambda: _linked(peers), VERDICT_WAIT_S)
        watched_pod.kill()
        assert wait_until(lambda: bool(told), VERDICT_WAIT_S), "the killed pod was not declared lost"
        (lost,) = told[0]
        assert (lost.group_rank, lost.worker) == (1, "pod-1") and lost.last_seen_ns is not None
        assert peers.lost_pods.search() == (lost,)
    finally:
        peers.stop()


def test_a_pod_whose_workers_fail_takes_the_verdict_a_link_gave_elsewhere_without_waiting_its_window(
    server_port: int,
) -> None:
    """3 pods: pod 1 watches pod 2 (a real process). Pod 0's workers fail the moment pod 2 is killed,
    before any verdict: its search (a 60 s window) takes the one pod 1's link gives within moments."""
    pod = subprocess.Popen([sys.executable, "-c", _POD, str(server_port), "3"], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    try:
        assert pod.stdout is not None and pod.stdout.readline().strip() == "ready"
        searching, _ = _watcher(server_port, 0, 3, failure_look_s=2 * VERDICT_WAIT_S)
        watcher, told = _watcher(server_port, 1, 3)
        try:
            assert wait_until(lambda: _linked(watcher), VERDICT_WAIT_S)
            pod.kill()
            started = time.monotonic()
            (lost,) = searching.lost_pods.search()
            assert time.monotonic() - started < VERDICT_WAIT_S, "the search waited out its window"
            assert (lost.group_rank, lost.worker) == (2, "pod-2") and lost.last_seen_ns is not None
            assert wait_until(lambda: bool(told), VERDICT_WAIT_S) and told[0] == (lost,)
        finally:
            searching.stop()
            watcher.stop()
    finally:
        pod.kill()
        pod.wait()


def test_a_pod_that_said_it_was_done_and_exited_is_not_lost(
    server_port: int, watched_pod: subprocess.Popen[str]
) -> None:
    peers, told = _watcher(server_port)
    try:
        assert wait_until(lambda: _linked(peers), VERDICT_WAIT_S)
        _send(watched_pod, "finish")
        assert watched_pod.wait(timeout=VERDICT_WAIT_S) == 0
        assert wait_until(lambda: peers._current().link.closed, VERDICT_WAIT_S)  # type: ignore[union-attr]
        time.sleep(QUIET_S)
        assert told == []
    finally:
        peers.stop()


@pytest.mark.parametrize("soft", [False, True], ids=["hard", "soft"])
def test_a_pod_that_announced_its_failure_and_exited_is_lost_only_under_soft_restarts(
    server_port: int, watched_pod: subprocess.Popen[str], soft: bool
) -> None:
    """A failed pod's silence is expected: under hard restarts it writes its document and exits, and
    the job ends with it. Under soft ones its agent lives on (it restarts its workers, or ends the job
    for everyone), so one whose processes then end without either (its kubelet stopped it and it
    could not leave the world) is lost: without the verdict its peers would wait for a world change
    until their collective timeout."""
    peers, told = _watcher(server_port)
    peers.failed_pods_live_on = soft
    try:
        assert wait_until(lambda: _linked(peers), VERDICT_WAIT_S)
        _ask(watched_pod, "fail")
        time.sleep(QUIET_S)
        assert told == []  # failing, not lost: its link and its heartbeat go on
        watched_pod.kill()
        if soft:
            assert wait_until(lambda: bool(told), VERDICT_WAIT_S), "the failed pod that ended was not declared lost"
            (lost,) = told[0]
            assert (lost.group_rank, lost.worker) == (1, "pod-1")
        else:
            assert wait_until(lambda: peers._current().link.closed, VERDICT_WAIT_S)  # type: ignore[union-attr]
            time.sleep(QUIET_S)
            assert told == []
    finally:
        peers.stop()


def test_a_frozen_pod_keeps_its_link_and_a_kill_while_frozen_closes_it(
    server_port: int, watched_pod: subprocess.Popen[str]
) -> None:
    """A frozen pod closes nothing: only the silence limit can find it. Killed while frozen, it is gone."""
    peers, told = _watcher(server_port)
    try:
        assert wait_until(lambda: _linked(peers), VERDICT_WAIT_S)
        os.kill(watched_pod.pid, signal.SIGSTOP)
        time.sleep(QUIET_S)
        assert told == []
        watched_pod.kill()
        assert wait_until(lambda: bool(told), VERDICT_WAIT_S)
    finally:
        peers.stop()


def test_a_forked_child_holds_no_copy_of_the_agent_s_link(
    server_port: int, watched_pod: subprocess.Popen[str]
) -> None:
    """The agent forks a worker that outlives it: its exit still closes the link (the child dropped
    its copies at the fork), and the child's own exit before it closes nothing."""
    peers, told = _watcher(server_port)
    try:
        assert wait_until(lambda: _linked(peers), VERDICT_WAIT_S)
        _send(watched_pod, "fork")
        assert watched_pod.stdout is not None
        first = int(watched_pod.stdout.readline())
        os.kill(first, signal.SIGKILL)  # a worker's death is no pod's loss
        time.sleep(QUIET_S)
        assert told == []
        _send(watched_pod, "fork")
        survivor = int(watched_pod.stdout.readline())
        try:
            watched_pod.kill()  # the agent dies; its forked worker lives on
            assert wait_until(lambda: bool(told), VERDICT_WAIT_S), "the forked worker kept the link open"
        finally:
            os.kill(survivor, signal.SIGKILL)
    finally:
        peers.stop()


def test_a_link_to_a_port_another_process_listens_on_is_never_made(server_port: int) -> None:
    """The greeting carries the token the peer published: a stranger's port is no link."""
    endpoint = link_hub().listen(("127.0.0.1", server_port))
    assert endpoint is not None
    stranger = link_hub().watch(LinkEndpoint(endpoint.host, server_port, endpoint.token), on_closed=lambda: None)
    assert wait_until(lambda: stranger.given_up, VERDICT_WAIT_S)
    assert not stranger.established and not stranger.closed
    own = link_hub().watch(endpoint, on_closed=lambda: None)
    try:
        assert wait_until(lambda: own.established, VERDICT_WAIT_S)
    finally:
        own.release()


@pytest.mark.parametrize("text", [
    None, b"", b"abc", b"tok 0 127.0.0.1", b"tok 70000 127.0.0.1", b"tok 80", b"t/k 80 host", b"\xff 80 h",
    b"tok 80 " + b"h" * 300,
])
def test_a_malformed_endpoint_is_no_endpoint(text: bytes | None) -> None:
    assert LinkEndpoint.from_text(text) is None


def test_an_endpoint_reads_back_as_published() -> None:
    endpoint = LinkEndpoint("10.0.3.7", 40123, "0a1b2c3d4e5f6071")
    assert LinkEndpoint.from_text(endpoint.to_text().encode()) == endpoint


def test_the_store_address_is_found_under_its_prefixes(server_port: int) -> None:
    store = client(server_port)
    assert store_address(PrefixStore("a", PrefixStore("b", store))) == ("127.0.0.1", server_port)
    assert store_address(object()) is None
