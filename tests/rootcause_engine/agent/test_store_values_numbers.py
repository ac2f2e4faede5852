"""Numbers read from the rendezvous store are ASCII decimal within bounds (``agent/store_values.py``,
``agent/hang_watch.py``), on a real ``TCPStore`` on loopback with real ``PeerWatch`` threads.

``int()`` reads other scripts' digits (the Arabic-Indic three is 3); torch's server does not, and
closes the connection of a client that ``add``s to such a value: a counter forged so mid-job cost
the next pod that announced its failure its store connection, and its peers declared it lost.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rootcause_core.collectives import CollectivePosition
from rootcause_engine.agent.diagnosis.stalled_rank import PeerWait, waits_text
from rootcause_engine.agent.hang_watch import HangSettings, HangWatch
from rootcause_engine.agent.store_values import INT64_MAX, int_value
from rootcause_engine.worker.progress_beacon import GroupProgress
from testbed.sync import wait_until
from testbed.tcp_store import client
from tests.rootcause_engine.agent.test_hang_watch import _SLEEP, S, _Ledger, _looks, _Peers, _start, _worker
from tests.scenarios.test_forged_store_values import EVENTS, WAIT_S, Pod, beats_on

pytestmark = pytest.mark.timeout(120)


def test_a_counter_forged_to_another_script_s_digit_mid_job_loses_no_announcement_and_no_pod(
        server_port: int) -> None:
    """Three pods joined (the counter reads 3); the forger writes the Arabic-Indic 3 over it. Pod 1
    announces its failure: the counter is repaired, the announcement reaches both peers, pod 1
    keeps its connection and beats on, and no pod is declared lost."""
    pods = [Pod(server_port, rank, 3, silence_s=1.0) for rank in range(3)]
    try:
        assert wait_until(lambda: all(len(pod.watch.members()) == 3 for pod in pods), WAIT_S)
        forger = client(server_port)
        assert forger.get(f"{EVENTS}/len") == b"3"
        forger.set(f"{EVENTS}/len", "\u0663".encode())
        pods[1].watch.failures.announce()
        assert wait_until(lambda: pods[0].peer_failed == 1 and pods[2].peer_failed == 1, WAIT_S)
        time.sleep(3.0)  # three silence limits
        assert beats_on(server_port, [0, 1, 2]) and [pod.lost for pod in pods] == [[], [], []]
        pods[1].watch.failures.done()  # its "done" lands too: it may go silent now
        pods[1].watch.stop()
        time.sleep(3.0)
        assert [pod.lost for pod in pods] == [[], [], []]
        assert forger.get(f"{EVENTS}/len") == b"5"  # three joins, a failure, a "done"
    finally:
        for pod in pods:
            pod.watch.close()


#: What a forger would try: digits of several scripts, signs, spaces, separators.
_NUMBERISH = st.text(st.sampled_from("0123456789+-_ \n\u0663\u0966\uff17"), max_size=8)


@settings(max_examples=200)
@given(_NUMBERISH | st.text(max_size=8) | st.binary(max_size=8))
def test_a_number_is_read_only_when_torch_s_server_reads_it_too(text: str | bytes) -> None:
    """Whatever a value holds, it reads as a count only if it is ASCII digits: a count torch's
    ``add`` takes (the property the ledger's counters stand on), and never outside its bounds."""
    raw = text.encode() if isinstance(text, str) else text
    number = int_value(raw, "rootcause/test-number", high=1000)
    if number is not None:
        assert raw.isdigit() and raw.isascii() and 0 <= number <= 1000 and int(raw) == number


def test_every_count_read_is_one_the_server_adds_to(server_port: int) -> None:
    """The server's own parser agrees: for each value read as a count, ``add`` answers and the
    connection stays; the values refused include the ones ``int`` would take."""
    store = client(server_port)
    accepted = refused = 0
    for raw in [b"7", b"0012", "\u0663".encode(), "\uff17".encode(), b"+7", b" 7", b"7_0", b"-7", b"", b"7\n"]:
        if int_value(raw, "rootcause/test-server") is None:
            refused += 1
            continue
        accepted += 1
        store.set("rootcause/test-server", raw)
        assert store.add("rootcause/test-server", 1) == int(raw) + 1
    assert (accepted, refused) == (2, 8)
    assert int_value(str(INT64_MAX).encode(), "k") == INT64_MAX


def test_a_wait_forged_to_begin_before_any_clock_gives_a_bounded_verdict_that_formats(
        tmp_path: object, server_port: int) -> None:
    """A peer pod's published waits: one forged to begin at -10**30 ns (a wait of 10**21 s, whose
    message raised ``OverflowError`` inside the diagnosis), and a real one of 30 s. The forged one
    is refused as it is read; the verdict rests on the real one, and its message formats."""
    store = client(server_port)
    now = time.time_ns()
    forged = PeerWait(3, "pod-1", CollectivePosition("0", 5, "gloo:all_reduce", -10**30))
    real = PeerWait(2, "pod-1", CollectivePosition("0", 5, "gloo:all_reduce", now - 30 * S))
    store.set("rootcause/hang/wait/1", waits_text([forged, real]))
    processes: list[subprocess.Popen[bytes]] = []
    try:
        asleep = _start(processes, _SLEEP)
        worker = _worker(tmp_path, asleep, 0, GroupProgress("0", 4, 4))  # type: ignore[arg-type]
        watch = HangWatch(_Ledger([worker]), _Peers(store), HangSettings(after_s=1.5),  # type: ignore[arg-type]
                          worker_name="pod-0")
        found = _looks(watch, 3.0)
        verdict = found[asleep.pid]
        assert [wait.rank for wait in verdict.waits] == [2] and 30 <= verdict.waited_s < 3600
        assert "waited for it for " in verdict.message() and sys.float_info.max > verdict.waited_s
    finally:
        for process in processes:
            process.kill()
            process.wait()
