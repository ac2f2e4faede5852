"""Error files parsed and collected for the reader's tests: the shared input of the aggregation and the
rendering tests (the prefix, one record per file, a collector's result, and a sample with every kind of
writer: old, victim, root causes tied and not)."""

from __future__ import annotations

from backend_reader.aggregate import Collector
from backend_reader.documents import FailureRecord, SkippedFile, parse_error_document
from backend_reader.results import ReadResult
from testbed.reader_support import BASE_NS, error_document

PREFIX = "gs://bucket/out"


def record(name: str, data: bytes) -> FailureRecord:
    """The record of the error file ``name`` under :data:`PREFIX` holding ``data`` (it must parse)."""
    outcome = parse_error_document(data, f"{PREFIX}/{name}")
    assert isinstance(outcome, FailureRecord)
    return outcome


def collect(outcomes: list[FailureRecord | SkippedFile], summary_bytes: int = 4096) -> ReadResult:
    """The reader's result for ``outcomes``, added in the order given."""
    collector = Collector(PREFIX, error_files=len(outcomes), summary_bytes=summary_bytes)
    for outcome in outcomes:
        collector.add(outcome)
    return collector.result()


def sample() -> list[FailureRecord]:
    """Five files in no order: an old writer's (no worker, no time), a victim's, and three root causes,
    two of them tied at the earliest time."""
    return [
        record("error-old.pb", error_document("RuntimeError: old writer", worker=None, timestamp_ns=None)),
        record("error-b-2.pb", error_document("[victim] SIGTERM", worker="b", timestamp_ns=BASE_NS - 10)),
        record("error-c-3.pb", error_document("[root cause] ValueError", worker="c", timestamp_ns=BASE_NS + 5)),
        record("error-a-1.pb", error_document("[root cause] OOM", worker="a", timestamp_ns=BASE_NS)),
        record("error-d-4.pb", error_document("[root cause] OOM", worker="a", timestamp_ns=BASE_NS)),
    ]
