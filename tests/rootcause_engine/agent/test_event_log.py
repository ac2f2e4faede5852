"""The append-only event log (``rootcause_engine/agent/event_log.py``): an event's JSON and what a reader accepts,
and a log on a real ``TCPStore`` on loopback, read by clients of their own: one order for all, forged entries
and counters, a full log, a late entry."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from torch.distributed import TCPStore

from rootcause_engine.agent.event_log import ENTRY_BYTES, MAX_NAME_CHARS, MAX_REASON_CHARS, Event, EventLog
from testbed.tcp_store import client

KINDS = ("join", "leave", "fatal")
COUNT_KEY = "test/log/len"


def _entry_key(number: int) -> str:
    return f"test/log/{number}"


def _call(store: Any) -> Callable[..., Any]:
    def call(operation: str, *args: Any) -> Any:
        return getattr(store, operation)(*args)

    return call


def _log(*, max_entries: int = 16, kinds: tuple[str, ...] = KINDS) -> EventLog:
    return EventLog(COUNT_KEY, _entry_key, kinds=kinds, max_rank=7, max_entries=max_entries)


def _parse(entry: object) -> Event | None:
    value = entry if isinstance(entry, bytes) else json.dumps(entry).encode()
    return Event.parse(value, "test/log/1", KINDS, 7)


# --- one event ---------------------------------------------------------------------------------------


def test_an_event_is_compact_json_without_the_fields_it_does_not_use() -> None:
    assert Event("join", 2, "pod-2", time_ns=5).to_json() == '{"kind":"join","rank":2,"name":"pod-2","time_ns":5}'
    full = Event("fatal", 1, "pod-1", "rank 3 raised", 7, {"seq": 4})
    assert json.loads(full.to_json()) == {"kind": "fatal", "rank": 1, "name": "pod-1", "time_ns": 7,
                                          "reason": "rank 3 raised", "data": {"seq": 4}}


def test_a_long_name_or_reason_is_cut_so_an_entry_stays_readable() -> None:
    event = Event("fatal", 0, "p" * 1000, "r" * 50_000, 1)
    written = json.loads(event.to_json())
    assert (len(written["name"]), len(written["reason"])) == (MAX_NAME_CHARS, MAX_REASON_CHARS)
    assert len(event.to_json().encode()) <= ENTRY_BYTES
    assert _parse(event.to_json().encode()) == Event("fatal", 0, "p" * MAX_NAME_CHARS, "r" * MAX_REASON_CHARS, 1)


def test_an_event_reads_back_as_it_was_written() -> None:
    event = Event("leave", 7, "pod-7", "preempted: \u00e9\u4e2d\n", 1_795_000_000_000_000_000, [1, "two"])
    assert _parse(event.to_json().encode()) == event
    assert _parse({"kind": "join", "rank": 0}) == Event("join", 0)  # name, reason and time default


@pytest.mark.parametrize(
    "entry",
    [
        {"kind": "lost", "rank": 0},  # a kind of another log
        {"kind": "join", "rank": 8},  # past the highest rank
        {"kind": "join", "rank": -1},
        {"kind": "join", "rank": True},
        {"kind": "join", "rank": "1"},
        {"kind": "join"},
        {"kind": "join", "rank": 0, "name": 5},
        {"kind": "join", "rank": 0, "reason": ["x"]},
        {"kind": "join", "rank": 0, "time_ns": -1},
        {"kind": "join", "rank": 0, "time_ns": 1.5},
        ["join", 0],
        b"not json",
        b"",
    ],
)
def test_anything_that_is_not_an_event_of_this_log_is_refused(entry: object) -> None:
    assert _parse(entry) is None


def test_an_entry_larger_than_a_reader_accepts_is_refused() -> None:
    assert _parse({"kind": "join", "rank": 0, "data": "x" * ENTRY_BYTES}) is None
    assert _parse({"kind": "join", "rank": 0, "data": "x" * (ENTRY_BYTES // 2)}) is not None


# --- a log in the store ------------------------------------------------------------------------------


def test_what_each_pod_appends_every_pod_reads_in_one_order(store_server: TCPStore) -> None:
    pods = [(_log(), _call(client(store_server.port))) for _ in range(3)]
    events = [Event("join", 0, "pod-0", "", 1), Event("join", 1, "pod-1", "", 2), Event("fatal", 1, "pod-1", "x", 3),
              Event("leave", 2, "pod-2", "", 4)]
    numbers = [pods[index % 3][0].append(pods[index % 3][1], event) for index, event in enumerate(events)]
    assert numbers == [1, 2, 3, 4]
    for log, call in pods:
        assert log.length(call) == 4
        assert log.refresh(call) == tuple(events)
        assert log.events() == tuple(events)


def test_a_fresh_log_is_empty_and_events_is_only_what_was_read(store_server: TCPStore) -> None:
    reader, writer = _log(), _log()
    call = _call(client(store_server.port))
    assert (reader.length(call), reader.refresh(call), reader.events()) == (0, (), ())
    writer.append(call, Event("join", 3, "pod-3"))
    assert reader.events() == ()  # no store call: nothing read since
    assert reader.refresh(call) == (Event("join", 3, "pod-3"),) == reader.events()


def test_a_writer_may_not_append_a_kind_its_log_does_not_hold(store_server: TCPStore) -> None:
    with pytest.raises(AssertionError):
        _log().append(_call(store_server), Event("lost", 0))


def test_a_forged_entry_is_skipped_and_the_entries_after_it_are_read(store_server: TCPStore) -> None:
    forger = _call(client(store_server.port))
    log, call = _log(), _call(client(store_server.port))
    log.append(call, Event("join", 0, "pod-0"))
    assert log.store_log.append(forger, '{"kind":"join","rank":99}') == 2  # a rank no pod has
    assert log.store_log.append(forger, "<html>") == 3
    log.append(call, Event("leave", 0, "pod-0", "done"))
    assert log.refresh(call) == (Event("join", 0, "pod-0"), Event("leave", 0, "pod-0", "done"))
    assert log.length(call) == 4


def test_a_full_log_takes_no_more_entries(store_server: TCPStore) -> None:
    log, call = _log(max_entries=2), _call(store_server)
    assert [log.append(call, Event("join", rank)) for rank in range(3)] == [1, 2, None]
    assert log.refresh(call) == (Event("join", 0), Event("join", 1))


def test_a_forged_counter_is_repaired_to_the_entries_written_and_appending_goes_on(store_server: TCPStore) -> None:
    call = _call(client(store_server.port))
    log = _log()
    log.append(call, Event("join", 0, "pod-0"))
    log.append(call, Event("join", 1, "pod-1"))
    store_server.set(COUNT_KEY, "many")  # a forger, or a torn write
    assert store_server.get(COUNT_KEY) == b"many"  # a set is not answered: this read waits for it to land
    reader = _log()
    assert reader.length(call) is None
    assert reader.refresh(call) == (Event("join", 0, "pod-0"), Event("join", 1, "pod-1"))
    assert store_server.get(COUNT_KEY) == b"2"
    assert log.append(call, Event("fatal", 1, "pod-1", "rank 3 raised")) == 3
    assert reader.refresh(call)[-1] == Event("fatal", 1, "pod-1", "rank 3 raised")


def test_a_forged_counter_is_repaired_by_the_next_writer_too(store_server: TCPStore) -> None:
    call = _call(store_server)
    log = _log()
    log.append(call, Event("join", 0))
    store_server.set(COUNT_KEY, "-5")
    assert log.append(call, Event("join", 1)) == 2
    assert _log().refresh(call) == (Event("join", 0), Event("join", 1))


def test_an_entry_numbered_but_not_written_yet_takes_its_place_in_the_order_once_written(
    store_server: TCPStore,
) -> None:
    call = _call(client(store_server.port))
    log = _log()
    log.append(call, Event("join", 0))
    slow_number = store_server.add(COUNT_KEY, 1)  # a writer that numbered its entry and has not written it yet
    log.append(call, Event("join", 2))
    reader = _log()
    assert reader.refresh(call) == (Event("join", 0), Event("join", 2))  # the entries after the gap are read
    store_server.compare_set(_entry_key(slow_number), "", Event("join", 1).to_json())
    assert reader.refresh(call) == (Event("join", 0), Event("join", 1), Event("join", 2))


def test_read_through_gives_exactly_the_prefix_asked_for(store_server: TCPStore) -> None:
    call = _call(store_server)
    writer = _log()
    for rank in range(4):
        writer.append(call, Event("join", rank))
    reader = _log()
    assert reader.read_through(call, 2, poll_s=0.01) == (Event("join", 0), Event("join", 1))
    assert reader.read_through(call, 4, poll_s=0.01) == tuple(Event("join", rank) for rank in range(4))
    assert reader.read_through(call, 3, poll_s=0.01) == tuple(Event("join", rank) for rank in range(3))


def test_a_log_of_other_kinds_on_the_same_keys_reads_none_of_them(store_server: TCPStore) -> None:
    call = _call(store_server)
    _log().append(call, Event("fatal", 0, "pod-0", "boom"))
    assert _log(kinds=("join",)).refresh(call) == ()
