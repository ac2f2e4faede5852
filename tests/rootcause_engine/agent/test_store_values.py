"""Store values are checked in one place (``agent/store_values.py``): on a real ``TCPStore`` on loopback.

A counter forged to a non-number must not cost a reader its connection (torch's server closes the
connection of a client that ``add``s to one); a log with a gap or an inflated counter must be read in
bounded steps, without waiting on the gap for ever.
"""

from __future__ import annotations

import dataclasses
import enum
import time
from typing import Any

import pytest

from rootcause_engine.agent import store_values
from rootcause_engine.agent.store_values import (
    INVALID,
    MAX_KEYS_PER_READ,
    VOID,
    LogCursor,
    StoreLog,
    bump_counter,
    conform,
    dataclass_from_json,
    int_value,
    json_value,
    read_counter,
    read_value,
    text_value,
)
from rootcause_engine.upstream.say_once import SayOnce

pytestmark = pytest.mark.timeout(60)


class Calls:
    """A store's ``call``, recording how many keys each operation was given."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.keys_per_call: list[tuple[str, int]] = []

    def __call__(self, operation: str, *args: Any) -> Any:
        self.keys_per_call.append((operation, len(args[0]) if args and isinstance(args[0], list) else 1))
        return getattr(self.store, operation)(*args)


def test_a_key_is_read_without_waiting_and_without_writing(prefixed_store: Any) -> None:
    call = Calls(prefixed_store)
    started = time.monotonic()
    assert read_value(call, "absent") is None and not prefixed_store.check(["absent"])
    assert time.monotonic() - started < 5  # a get would wait the client's 10 s
    prefixed_store.set("present", b"\x00\xffbytes")
    assert read_value(call, "present") == b"\x00\xffbytes"


@pytest.mark.parametrize("forged", ["abc", "99999999999999999999999", "\xff", "-5", "12abc"])
def test_a_forged_counter_reads_as_bad_and_the_reader_keeps_its_connection(prefixed_store: Any, forged: str) -> None:
    prefixed_store.set("count", forged)
    call = Calls(prefixed_store)
    assert read_counter(call, "count") is None  # not a count within [0, MAX_COUNT]
    assert bump_counter(call, "count") is None and prefixed_store.get("count") == forged.encode()  # nothing written
    prefixed_store.set("alive", "1")
    assert prefixed_store.get("alive") == b"1"  # the connection is still there: add(key, 0) would have closed it


def test_a_counter_reads_zero_when_absent_and_refuses_past_its_cap(prefixed_store: Any) -> None:
    call = Calls(prefixed_store)
    assert read_counter(call, "count") == 0
    assert bump_counter(call, "count", high=2) == 1 and bump_counter(call, "count", high=2) == 2
    assert bump_counter(call, "count", high=2) is None and read_counter(call, "count", high=2) == 2
    prefixed_store.set("huge", str(10**15))
    assert read_counter(call, "huge") is None


def test_values_of_the_wrong_size_type_or_range_are_none() -> None:
    assert json_value(b"[1, 2]", "k") == [1, 2] and json_value(None, "k") is None
    assert json_value(b"[" * 10_000, "k") is None and json_value(b"[1]" + b" " * 5000, "k") is None
    assert json_value(b"\xff", "k") is None and json_value(42, "k") is None  # type: ignore[arg-type]
    assert int_value(b"123", "k") == 123 and int_value(b"-1", "k") is None and int_value(b"1e3", "k") is None
    assert int_value(b"9" * 30, "k") is None and int_value(b"5", "k", low=6) is None
    assert text_value(b"x" * 5000, "k") is None and text_value(b"ok", "k") == "ok"


def test_a_bad_value_is_logged_once_per_key(caplog: pytest.LogCaptureFixture) -> None:
    for _ in range(5):
        json_value(b"[[[", "rootcause/test-once")
    assert sum("rootcause/test-once" in r.getMessage() and r.levelname == "WARNING" for r in caplog.records) == 1


class Colour(enum.Enum):
    RED = "red"


@dataclasses.dataclass(frozen=True)
class Sample:
    count: int
    name: str
    when: int | None
    colour: Colour
    flag: bool = False


def test_a_dataclass_is_read_back_field_by_field_with_the_types_it_declares() -> None:
    good = {"count": 3, "name": "x", "when": None, "colour": "red", "extra": [1]}
    assert dataclass_from_json(Sample, good) == Sample(3, "x", None, Colour.RED)
    for field, wrong in [("count", "3"), ("count", True), ("when", 1.5), ("colour", "blue"), ("flag", 1),
                         ("name", None), ("count", 2**70)]:
        assert dataclass_from_json(Sample, {**good, field: wrong}) is None, (field, wrong)
    assert dataclass_from_json(Sample, {"name": "x"}) is None and dataclass_from_json(Sample, [1]) is None
    assert conform(["a"], int | None) is INVALID


def _log() -> StoreLog:
    return StoreLog("log/len", lambda index: f"log/{index}", max_entries=1000, grace_s=0.3)


def test_a_gap_delays_no_later_entry_and_is_voided_after_the_grace(prefixed_store: Any) -> None:
    """A writer that died between numbering its entry and writing it: the entries after it are read
    at once; the gap is voided after the grace, so a late writer numbers its entry again."""
    log, call = _log(), Calls(prefixed_store)
    prefixed_store.add("log/len", 1)  # numbered, never written
    assert log.append(call, '"second"') == 2
    cursor = LogCursor(log)
    assert cursor.poll(call, 2) == [(2, b'"second"')] and cursor.pending(2)
    time.sleep(0.35)
    assert cursor.poll(call, 2) == [] and not cursor.pending(2)
    assert prefixed_store.get("log/1") == VOID
    # the late writer finds its number voided: its compare_set loses, it takes the next number
    assert bytes(prefixed_store.compare_set("log/1", "", '"late"')) == VOID
    assert log.append(call, '"late"') == 3
    assert cursor.poll(call, 3) == [(3, b'"late"')]


def test_a_reader_that_needs_the_whole_log_waits_for_a_gap_at_most_the_grace(prefixed_store: Any) -> None:
    log, call = _log(), Calls(prefixed_store)
    prefixed_store.add("log/len", 1)
    log.append(call, '"b"')
    started = time.monotonic()
    assert LogCursor(log).read_through(call, 2, poll_s=0.01) == [(2, b'"b"')]
    assert 0.3 <= time.monotonic() - started < 5


def test_an_inflated_counter_is_read_in_bounded_steps(prefixed_store: Any) -> None:
    """A counter forged far past what was written: every store call looks at no more than
    MAX_KEYS_PER_READ keys, and a count past the log's cap is no count at all."""
    log, call = _log(), Calls(prefixed_store)
    prefixed_store.add("log/len", 900)
    assert log.length(call) == 900
    cursor = LogCursor(log)
    assert cursor.poll(call, 900) == []
    assert max(keys for _, keys in call.keys_per_call) <= MAX_KEYS_PER_READ
    assert cursor.next == MAX_KEYS_PER_READ + 1
    prefixed_store.add("log/len", 10**9)
    assert log.length(call) is None and log.append(call, '"x"') is None


def test_the_keys_reported_are_bounded(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A forger writing many bad keys cannot grow the reader's memory: past the cap, debug logs only."""
    monkeypatch.setattr(store_values, "_reported", SayOnce(most=8))
    with caplog.at_level("DEBUG", logger=store_values.__name__):
        for index in range(100):
            store_values.bad_value(f"rootcause/forged/{index}", "test")
    levels = [r.levelname for r in caplog.records if "rootcause/forged/" in r.getMessage()]
    assert levels == ["WARNING"] * 8 + ["DEBUG"] * 92
