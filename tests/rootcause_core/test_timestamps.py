"""Time conversions (``rootcause_core.timestamps``): integer nanoseconds to RFC 3339 text and protobuf
``Timestamp`` and back, exactly; and the rule every reader applies to a document's time."""

from __future__ import annotations

import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from hypothesis import given
from hypothesis import strategies as st

from rootcause_core.timestamps import (
    MAX_TIMESTAMP_SECONDS,
    MIN_TIMESTAMP_SECONDS,
    NS_PER_S,
    document_time_ns,
    from_protobuf,
    from_seconds,
    rfc3339_ns,
    rfc3339_ns_or_none,
    to_protobuf,
    to_seconds,
)

valid_ns = st.integers(MIN_TIMESTAMP_SECONDS * NS_PER_S, MAX_TIMESTAMP_SECONDS * NS_PER_S + NS_PER_S - 1)


def test_rfc3339_with_nanoseconds() -> None:
    assert rfc3339_ns(0) == "1970-01-01T00:00:00.000000000Z"
    assert rfc3339_ns(1_700_000_000_123_456_789) == "2023-11-14T22:13:20.123456789Z"
    assert rfc3339_ns(-1) == "1969-12-31T23:59:59.999999999Z"
    assert rfc3339_ns(-62_135_596_800 * 10**9) == "0001-01-01T00:00:00.000000000Z"


def test_rfc3339_pads_early_years_and_reaches_the_last_valid_instant() -> None:
    assert rfc3339_ns(-61_000_000_000 * NS_PER_S) == "0036-12-26T11:33:20.000000000Z"  # %Y would print "36"
    assert rfc3339_ns(MAX_TIMESTAMP_SECONDS * NS_PER_S + NS_PER_S - 1) == "9999-12-31T23:59:59.999999999Z"


def test_none_stays_none_as_text() -> None:
    assert rfc3339_ns_or_none(None) is None
    assert rfc3339_ns_or_none(1) == "1970-01-01T00:00:00.000000001Z"


@given(valid_ns, valid_ns)
def test_the_text_sorts_as_the_nanoseconds_do(a: int, b: int) -> None:
    assert (rfc3339_ns(a) < rfc3339_ns(b)) == (a < b)
    assert len(rfc3339_ns(a)) == len("2026-11-21T11:07:08.123456789Z")


@given(valid_ns)
def test_protobuf_round_trip_is_exact(timestamp_ns: int) -> None:
    timestamp = to_protobuf(timestamp_ns)
    assert 0 <= timestamp.nanos < NS_PER_S  # a valid Timestamp, before the epoch too
    assert from_protobuf(timestamp) == timestamp_ns
    assert timestamp.ToNanoseconds() == timestamp_ns  # protobuf's own reading agrees


def test_a_time_before_the_epoch_has_positive_nanos() -> None:
    assert to_protobuf(-1) == Timestamp(seconds=-1, nanos=999_999_999)


def test_document_time_is_none_when_absent_or_zero_filled() -> None:
    assert document_time_ns(None) is None
    assert document_time_ns(Timestamp()) is None
    assert document_time_ns(Timestamp(seconds=0, nanos=1)) == 1
    assert document_time_ns(Timestamp(seconds=-1, nanos=0)) == -NS_PER_S


def test_document_time_accepts_the_whole_valid_range() -> None:
    assert document_time_ns(Timestamp(seconds=MIN_TIMESTAMP_SECONDS)) == MIN_TIMESTAMP_SECONDS * NS_PER_S
    last = Timestamp(seconds=MAX_TIMESTAMP_SECONDS, nanos=NS_PER_S - 1)
    assert document_time_ns(last) == MAX_TIMESTAMP_SECONDS * NS_PER_S + NS_PER_S - 1


@pytest.mark.parametrize(
    ("seconds", "nanos"),
    [
        (MAX_TIMESTAMP_SECONDS + 1, 0),
        (MIN_TIMESTAMP_SECONDS - 1, 0),
        (1_790_000_000, NS_PER_S),
        (1_790_000_000, -1),
    ],
)
def test_a_time_no_reader_can_place_is_refused_with_its_fields(seconds: int, nanos: int) -> None:
    with pytest.raises(ValueError, match=rf"^invalid timestamp \(seconds={seconds}, nanos={nanos}\)$"):
        document_time_ns(Timestamp(seconds=seconds, nanos=nanos))


def test_seconds_conversions() -> None:
    assert to_seconds(1_500_000_000) == 1.5
    assert from_seconds(1.5) == 1_500_000_000
    assert from_seconds(0.000_000_001) == 1
    assert isinstance(from_seconds(2.0), int)
