"""The soft world's typed keys (``agent.soft_world_store``) on real torch stores: each operation writes
what its key holds, reads back what it wrote, reads a forged value as documented, and follows the one
error policy (a store that does not answer raises ``StoreUnresponsive``; what the store raises passes)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from torch.distributed import HashStore

from rootcause_engine.agent.bounded_store import StoreUnresponsive
from rootcause_engine.agent.event_log import Event
from rootcause_engine.agent.soft_world_store import ABANDONED, FORMED, SoftWorldStore

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(params=["tcp", "hash"])
def torch_store(request: pytest.FixtureRequest) -> Any:
    """A real ``TCPStore`` under a round's prefix (as a job's pods share it), or a ``HashStore``."""
    return request.getfixturevalue("prefixed_store") if request.param == "tcp" else HashStore()


@pytest.fixture
def keys(torch_store: Any) -> Iterator[SoftWorldStore]:
    store = SoftWorldStore(torch_store, 10.0)
    yield store
    store.close()


def test_the_job_is_announced_with_its_first_world_s_node_count(keys: SoftWorldStore, torch_store: Any) -> None:
    assert keys.job.nodes() is None
    keys.job.announce(3)
    assert keys.job.nodes() == 3
    torch_store.set("rootcause/soft/job", b'{"nodes": "3"}')
    assert keys.job.nodes() is None  # no node count: no running job


def test_each_pod_added_later_gets_the_next_count_and_a_forged_counter_none(keys: SoftWorldStore,
                                                                             torch_store: Any) -> None:
    assert (keys.job.count_added_pod(), keys.job.count_added_pod()) == (1, 2)
    torch_store.set("rootcause/soft/added", b"abc")
    assert keys.job.count_added_pod() is None
    assert torch_store.get("rootcause/soft/added") == b"abc"  # nothing written


def test_the_finished_mark_and_the_exits(keys: SoftWorldStore) -> None:
    assert not keys.job.finished()
    keys.job.mark_finished()
    assert keys.job.finished()
    keys.job.mark_exited(0)
    assert keys.job.all_exited([0]) and not keys.job.all_exited([0, 1])
    keys.job.mark_exited(1)
    assert keys.job.all_exited([0, 1])


def test_the_membership_log_reads_back_its_changes_in_order(keys: SoftWorldStore) -> None:
    assert keys.log.length() == 0
    leave, join = Event("leave", 1, "pod-1", "raised", 5), Event("join", 1, "pod-1", "", 6)
    assert (keys.log.append(leave), keys.log.append(join)) == (1, 2)
    assert keys.log.length() == 2
    assert keys.log.changes_through(1, poll_s=0.01) == (leave,)
    assert keys.log.changes_through(2, poll_s=0.01) == (leave, join)


def test_the_first_node_to_claim_a_lost_node_wins_and_a_forged_claim_is_nobody_s(keys: SoftWorldStore,
                                                                                  torch_store: Any) -> None:
    assert keys.log.claim_lost(2, by=0)
    assert not keys.log.claim_lost(2, by=1)
    assert keys.log.claim_lost(2, by=0)  # the winner asking again still reads its own claim
    torch_store.set("rootcause/soft/lost/3", b"\xff" * 10)
    assert not keys.log.claim_lost(3, by=0)


def test_the_first_proposal_of_a_world_wins(keys: SoftWorldStore, torch_store: Any) -> None:
    assert not keys.worlds.proposed(1) and keys.worlds.length(1) is None
    assert keys.worlds.claim(1, 2) == 2
    assert keys.worlds.claim(1, 5) == 2  # the later proposal reads the winner's length
    assert keys.worlds.proposed(1) and keys.worlds.length(1) == 2
    torch_store.set("rootcause/soft/world/2", b"abc")
    assert keys.worlds.proposed(2) and keys.worlds.length(2) is None and keys.worlds.claim(2, 3) is None


def test_arrivals_are_read_one_node_or_all_at_once(keys: SoftWorldStore) -> None:
    assert not keys.worlds.arrived(1, 0)
    keys.worlds.arrive(1, 0)
    assert keys.worlds.arrived(1, 0) and not keys.worlds.arrived(2, 0)
    assert not keys.worlds.all_arrived(1, [0, 1])
    keys.worlds.arrive(1, 1)
    assert keys.worlds.all_arrived(1, [0, 1])


def test_the_first_decision_wins_and_a_forged_one_is_abandoned(keys: SoftWorldStore, torch_store: Any) -> None:
    assert keys.worlds.decision(1) is None
    assert keys.worlds.decide(1, FORMED) == FORMED
    assert keys.worlds.decide(1, ABANDONED) == FORMED and keys.worlds.decision(1) == FORMED
    torch_store.set("rootcause/soft/decided/2", b"\xffgarbage")
    assert keys.worlds.decision(2) == ABANDONED and keys.worlds.decide(2, FORMED) == ABANDONED


def test_a_store_that_does_not_answer_raises_store_unresponsive_within_the_deadline() -> None:
    class Frozen:
        def __getattr__(self, name: str) -> Callable[..., Any]:
            return lambda *args: time.sleep(3600)

    keys = SoftWorldStore(Frozen(), 0.2)
    started = time.monotonic()
    for call in (keys.job.finished, lambda: keys.worlds.claim(1, 1), lambda: keys.log.append(Event("leave", 0))):
        with pytest.raises(StoreUnresponsive):
            call()
    assert time.monotonic() - started < 10
    keys.close()


def test_what_the_store_raises_reaches_the_caller_as_it_is() -> None:
    class Broken:
        def __getattr__(self, name: str) -> Callable[..., Any]:
            def fail(*args: Any) -> Any:
                raise RuntimeError(f"{name} refused")

            return fail

    keys = SoftWorldStore(Broken(), 5.0)
    with pytest.raises(RuntimeError, match="check refused"):
        keys.job.finished()
    with pytest.raises(RuntimeError, match="set refused"):
        keys.job.mark_finished()
    keys.close()


def test_threads_sharing_one_store_each_get_their_own_answer(keys: SoftWorldStore) -> None:
    """The loop, its SIGTERM path and a test's threads may share a world: its calls are serialised."""
    errors: list[BaseException] = []

    def arrive_and_check(node: int) -> None:
        try:
            for version in range(1, 21):
                keys.worlds.arrive(version, node)
                assert keys.worlds.arrived(version, node)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=arrive_and_check, args=(node,)) for node in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not errors
    assert all(keys.worlds.all_arrived(version, range(4)) for version in range(1, 21))
