"""RFC 3339 timestamps with nanoseconds, UTC: the reader's one textual time format.

``datetime`` stops at microseconds, and failures across pods can be microseconds apart, so the
fraction is printed from the integer nanoseconds, always 9 digits, for stable sorting as text.
"""

from __future__ import annotations

import datetime

_NS_PER_S = 1_000_000_000
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def rfc3339_ns(timestamp_ns: int) -> str:
    """``2026-11-21T11:07:08.123456789Z`` for nanoseconds since the Unix epoch."""
    seconds, nanos = divmod(timestamp_ns, _NS_PER_S)
    moment = _EPOCH + datetime.timedelta(seconds=seconds)
    # the year by hand: strftime's %Y drops leading zeros for years before 1000 on glibc
    return f"{moment.year:04d}-{moment:%m-%dT%H:%M:%S}.{nanos:09d}Z"


def rfc3339_ns_or_none(timestamp_ns: int | None) -> str | None:
    """As :func:`rfc3339_ns`, passing ``None`` (no time known) through."""
    return None if timestamp_ns is None else rfc3339_ns(timestamp_ns)
