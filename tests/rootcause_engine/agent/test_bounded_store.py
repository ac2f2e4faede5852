"""A store whose host froze answers nothing: every operation of ours still returns within its deadline.

The store server runs in a process of its own, which the test stops with SIGSTOP, as a frozen node
stops (its sockets stay open). torch's own client waits for ever then (``add``, ``set``, ``check``,
``get``); through ``BoundedStore`` each call gives up after its deadline, the next ones at once, and
everything works again once the host is resumed.
"""

from __future__ import annotations

import concurrent.futures
import os
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest

from rootcause_engine.agent.bounded_store import BoundedStore, StoreUnresponsive
from testbed.processes import stop_process
from testbed.sync import wait_until
from testbed.tcp_store import client, store_in_process

#: torch's own client timeout: longer than the host stays frozen, so the call stuck in the freeze
#: still lands once the host resumes (only ``BoundedStore``'s deadline gives up on it earlier).
CLIENT_TIMEOUT_S = 30.0


@pytest.fixture
def server() -> Iterator[tuple[subprocess.Popen[str], int]]:
    with store_in_process() as served:
        yield served


@pytest.mark.slow
def test_a_frozen_store_host_costs_one_deadline_then_nothing_and_a_resumed_one_answers_again(
    server: tuple[subprocess.Popen[str], int],
) -> None:
    process, port = server
    store = BoundedStore(client(port, timeout_s=CLIENT_TIMEOUT_S), timeout_s=1.0)
    store.call("set", "k", "1")
    assert store.call("get", "k") == b"1"
    stop_process(process.pid)  # and wait until it has: a busy machine delivers SIGSTOP late
    started = time.monotonic()
    with pytest.raises(StoreUnresponsive, match="did not answer a add within 1 s"):
        store.call("add", "n", 1)
    with pytest.raises(StoreUnresponsive, match="has not answered a add"):
        store.call("check", ["k"])  # at once: the client is still inside the stuck call
    assert time.monotonic() - started < 30  # the deadline, not torch's wait for ever
    assert store.unresponsive_for_s > 0
    os.kill(process.pid, signal.SIGCONT)
    wait_until(lambda: store.unresponsive_for_s <= 0, 30)
    assert store.call("add", "n", 0) == 1  # the stuck add landed; the store is usable again
    store.close()


def test_an_operation_that_raises_is_raised_to_its_caller() -> None:
    class Broken:
        def get(self, key: str) -> bytes:
            raise RuntimeError(f"no key {key}")

    store = BoundedStore(Broken(), timeout_s=5)
    with pytest.raises(RuntimeError, match="no key a"):
        store.call("get", "a")
    store.close()
    with pytest.raises(StoreUnresponsive, match="closed"):
        store.call("get", "a")


class _SlowStore:
    """A store on a busy host: every operation answers, ``delay_s`` late."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.values: dict[str, str] = {}

    def check(self, keys: list[str]) -> bool:
        time.sleep(self.delay_s)
        return all(key in self.values for key in keys)

    def set(self, key: str, value: str) -> None:
        time.sleep(self.delay_s)
        self.values[key] = value


class _Stopped(Exception):
    pass


def _raise_stopped(signum: int, frame: object) -> None:
    raise _Stopped


def test_a_call_whose_caller_a_signal_interrupted_does_not_make_the_store_unresponsive() -> None:
    """The kubelet's SIGTERM raises in the agent's wait for a check (torch's ``SignalException``);
    the agent's next call, taking its pod out of the world, waits for that check's answer and goes
    through, instead of failing at once as if the store had stopped answering."""
    store = BoundedStore(_SlowStore(delay_s=0.5), timeout_s=5.0)
    previous = signal.signal(signal.SIGALRM, _raise_stopped)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.1)
        with pytest.raises(_Stopped):
            store.call("check", ["k"])
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    store.call("set", "k", "v")
    assert store.call("check", ["k"]) is True
    store.close()


def test_calls_from_two_threads_at_once_both_get_their_answer() -> None:
    store = BoundedStore(_SlowStore(delay_s=0.2), timeout_s=5.0)
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        calls = [pool.submit(store.call, "set", f"k{i}", "v") for i in range(2)]
        for call in calls:
            call.result(timeout=30)
    assert store.call("check", ["k0", "k1"]) is True
    store.close()
