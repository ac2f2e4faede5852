"""The round's ledger and the event log under it, on a real ``TCPStore`` on loopback: each pod its
own client, as each agent has."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from rootcause_core.collectives import CollectivePosition
from rootcause_core.testimony import LostPod, Member
from rootcause_engine.agent.event_log import Event, EventLog
from rootcause_engine.agent.peer_link import LinkEndpoint
from rootcause_engine.agent.round_ledger import DONE, FAILED, LOST, READ, SAID, RoundLedger
from rootcause_engine.agent.store_values import MAX_KEYS_PER_READ
from testbed.tcp_store import client

pytestmark = pytest.mark.timeout(60)


def _call(store: Any) -> Any:
    def call(operation: str, *args: Any) -> Any:
        return getattr(store, operation)(*args)

    return call


def test_what_each_pod_appends_every_pod_reads_in_one_order(server_port: int) -> None:
    pods = [RoundLedger(_call(client(server_port)), 3, rank) for rank in range(3)]
    endpoint = LinkEndpoint("127.0.0.1", 4242, "tok")
    pods[0].join(Member(0, "w0", 0, 2, True), endpoint)
    pods[1].join(Member(1, "w1", 2, 2, False), None)
    stall = CollectivePosition(pg="0", seq=7, op="gloo:all_reduce")
    pods[1].failed(stall)
    pods[0].failed(None)
    pods[2].lost(LostPod(1, "w1", 123))  # pod 2 (a watcher) on pod 1
    pods[0].mark(SAID)
    pods[0].mark(READ)
    pods[1].mark(DONE)
    histories = [pod.refresh() for pod in pods]
    assert histories[0] == histories[1] == histories[2]
    assert [(event.kind, event.rank) for event in histories[0]] == [
        ("join", 0), ("join", 1), ("failed", 1), ("failed", 0), ("lost", 1), ("said", 0), ("read", 0), ("done", 1)]
    reader = pods[2]
    joined = reader.joined()
    assert joined[0].member == Member(0, "w0", 0, 2, True) and joined[0].link == endpoint
    assert joined[1].member.worker == "w1" and joined[1].link is None
    assert reader.ranks(FAILED) == {0, 1} and reader.ranks(DONE) == {1}
    assert reader.stalls() == {1: stall}
    assert reader.ranks(SAID) == {0} and reader.ranks(READ) == {0}
    verdicts, seen = reader.verdicts()
    assert verdicts == [LostPod(1, "group rank 1", 123)] and seen == 8
    assert reader.verdicts(seen) == ([], 8)  # a consumer's place: nothing new since


def test_only_this_pod_s_plain_events_are_marked_and_only_round_kinds_are_counted(server_port: int) -> None:
    """``mark`` appends ``done``, ``said`` or ``read`` (a join, a failure or a verdict carries data:
    their own writers); ``ranks`` asks of the round's kinds only (a typo is a bug, not an empty set)."""
    ledger = RoundLedger(_call(client(server_port)), 2, 1)
    with pytest.raises(AssertionError):
        ledger.mark(FAILED)
    with pytest.raises(AssertionError):
        ledger.ranks("finished")
    assert ledger.ranks(LOST) == frozenset()


def test_a_rank_s_first_join_is_its_member_a_later_one_is_not(server_port: int) -> None:
    pod, stranger = (RoundLedger(_call(client(server_port)), 2, rank) for rank in (1, 0))
    pod.join(Member(1, "w1", 2, 2, False), None)
    stranger.join(Member(1, "impostor", 0, 8, True), None)
    stranger.refresh()
    assert stranger.joined()[1].member.worker == "w1"


def test_a_long_history_is_read_in_bounded_steps_in_one_refresh(server_port: int) -> None:
    """A thousand pods' joins: a late reader catches up at one look, each call reading at most
    :data:`MAX_KEYS_PER_READ` entries."""
    writer = RoundLedger(_call(client(server_port)), 1000, 0)
    for rank in range(1000):
        writer.join(Member(rank, f"w{rank}", rank, 1, rank == 0), None)
    calls: list[tuple[str, int]] = []
    store = client(server_port)

    def counted(operation: str, *args: Any) -> Any:
        keys = args[0] if operation in ("check", "multi_get") else [args[0]]
        calls.append((operation, len(keys)))
        return getattr(store, operation)(*args)

    reader = RoundLedger(counted, 1000, 999)
    assert len(reader.refresh()) == 1000 and len(reader.joined()) == 1000
    assert max(keys for _, keys in calls) <= MAX_KEYS_PER_READ
    assert len(calls) <= 1 + 2 * (1000 // (MAX_KEYS_PER_READ - 1) + 1)
    calls.clear()
    reader.refresh()
    assert len(calls) == 1  # nothing new: the length alone


def test_what_is_known_is_read_while_a_refresh_waits_on_a_silent_store(server_port: int) -> None:
    """A store that stopped answering holds up the refresh that asked it (up to the bounded
    store's deadline), never the readers of the history already read."""
    store = client(server_port)
    RoundLedger(_call(store), 2, 0).join(Member(0, "w0", 0, 1, True), None)
    answer = threading.Event()

    def stuck(operation: str, *args: Any) -> Any:
        if stuck.silent:  # type: ignore[attr-defined]
            answer.wait(10)
        return getattr(store, operation)(*args)

    stuck.silent = False  # type: ignore[attr-defined]
    ledger = RoundLedger(stuck, 2, 1)
    ledger.refresh()
    stuck.silent = True  # type: ignore[attr-defined]
    refreshing = threading.Thread(target=ledger.refresh)
    refreshing.start()
    time.sleep(0.2)
    started = time.monotonic()
    assert 0 in ledger.joined() and ledger.ranks(FAILED) == set()
    assert time.monotonic() - started < 1
    answer.set()
    refreshing.join(10)


def test_the_job_log_and_a_round_s_ledger_are_one_class_with_their_own_kinds(server_port: int) -> None:
    """A kind the log does not hold is refused at the writer (a bug) and skipped at the reader (a
    forger): the soft-restart world's ``leave`` is no event of a round."""
    store = client(server_port)
    job = EventLog("rootcause/soft/log/len", lambda n: f"rootcause/soft/log/{n}", kinds=("leave", "join"),
                   max_rank=10, max_entries=16)
    job.append(_call(store), Event("leave", 3, "pod-3", "rank 7 raised", 5))
    assert job.refresh(_call(store)) == (Event("leave", 3, "pod-3", "rank 7 raised", 5),)
    with pytest.raises(AssertionError):
        job.append(_call(store), Event(LOST, 3))
    stranger = EventLog("rootcause/soft/log/len", lambda n: f"rootcause/soft/log/{n}", kinds=("join",),
                        max_rank=10, max_entries=16)
    assert stranger.refresh(_call(store)) == ()
