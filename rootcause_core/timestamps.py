"""Time, in one place: nanoseconds since the epoch, its RFC 3339 text and its protobuf ``Timestamp``.

Every time this project records is integer nanoseconds since the Unix epoch (sub-second order
between pods is what the root-cause rule is about; a float would lose digits). This module is the
one home of the conversions. RFC 3339 with nanoseconds, UTC, is the one textual format.

``datetime`` stops at microseconds, and failures across pods can be microseconds apart, so the
fraction is printed from the integer nanoseconds, always 9 digits, for stable sorting as text.
"""

from __future__ import annotations

import datetime

from google.protobuf.timestamp_pb2 import Timestamp

#: Nanoseconds per second.
NS_PER_S = 1_000_000_000
#: google.protobuf.Timestamp's valid range: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z.
MIN_TIMESTAMP_SECONDS = -62_135_596_800
MAX_TIMESTAMP_SECONDS = 253_402_300_799
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def rfc3339_ns(timestamp_ns: int) -> str:
    """``2026-11-21T11:07:08.123456789Z`` for nanoseconds since the Unix epoch."""
    seconds, nanos = divmod(timestamp_ns, NS_PER_S)
    moment = _EPOCH + datetime.timedelta(seconds=seconds)
    # the year by hand: strftime's %Y drops leading zeros for years before 1000 on glibc
    return f"{moment.year:04d}-{moment:%m-%dT%H:%M:%S}.{nanos:09d}Z"


def rfc3339_ns_or_none(timestamp_ns: int | None) -> str | None:
    """As :func:`rfc3339_ns`, passing ``None`` (no time known) through."""
    return None if timestamp_ns is None else rfc3339_ns(timestamp_ns)


def to_protobuf(timestamp_ns: int) -> Timestamp:
    """An exact protobuf ``Timestamp`` (integer arithmetic: no float on the way, no digit lost)."""
    seconds, nanos = divmod(timestamp_ns, NS_PER_S)
    return Timestamp(seconds=seconds, nanos=nanos)


def from_protobuf(timestamp: Timestamp) -> int:
    """Nanoseconds since the epoch of a protobuf ``Timestamp``."""
    return timestamp.seconds * NS_PER_S + timestamp.nanos


def document_time_ns(timestamp: Timestamp | None) -> int | None:
    """The time an error document's ``ContainerError.timestamp`` carries, as every reader takes it.

    ``None`` when the field is absent (``timestamp`` is ``None``) or is exactly 1970-01-01T00:00:00Z:
    no real failure happened then, and it is what a writer that zero-fills the field produces.
    Raises ``ValueError`` (its text is the reason, for a person) for a time outside the protobuf
    ``Timestamp``'s valid range, which no reader can place. One rule for the reader, which skips such
    a document, and for the writer, whose file name must say what the reader will make of it.
    """
    if timestamp is None:
        return None
    seconds, nanos = timestamp.seconds, timestamp.nanos
    if not (MIN_TIMESTAMP_SECONDS <= seconds <= MAX_TIMESTAMP_SECONDS) or not (0 <= nanos < NS_PER_S):
        raise ValueError(f"invalid timestamp (seconds={seconds}, nanos={nanos})")
    if seconds == 0 and nanos == 0:
        return None
    return seconds * NS_PER_S + nanos


def to_seconds(duration_ns: int) -> float:
    """A duration or an instant in (float) seconds, for display and for APIs that take seconds."""
    return duration_ns / NS_PER_S


def from_seconds(seconds: float) -> int:
    """Seconds (a setting, ``time.time()``) as integer nanoseconds."""
    return int(seconds * NS_PER_S)
