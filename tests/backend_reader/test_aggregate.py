"""Pure tests of ``backend_reader.aggregate``: ordering error files into a result, the error.pb copy,
bounded messages and the root cause's ``ExecutionError``. The made-up errors are in ``test_results.py``,
the JSON shape in ``test_render.py``."""

from __future__ import annotations

import itertools

from flyteidl.core import execution_pb2

from backend_reader.documents import SkippedFile
from backend_reader.messages import TRUNCATION_INDICATOR
from backend_reader.render import to_proto_bytes
from testbed.reader_support import BASE_NS, error_document
from tests.backend_reader.made_records import PREFIX, collect, record, sample


def test_order_is_root_cause_first_and_independent_of_arrival() -> None:
    expected = ["error-a-1.pb", "error-d-4.pb", "error-c-3.pb", "error-old.pb", "error-b-2.pb"]
    for permutation in itertools.permutations(sample()):
        result = collect(list(permutation))
        assert [f.error_uri.rsplit("/", 1)[1] for f in result.failures] == expected


def test_untimed_old_file_never_wins_over_a_timed_one() -> None:
    old = record("error-0.pb", error_document("RuntimeError", worker=None, timestamp_ns=None))
    new = record("error-z.pb", error_document("RuntimeError", worker="z", timestamp_ns=BASE_NS + 10**12))
    assert collect([old, new]).root_cause == new


def test_error_pb_copy_is_not_counted_twice_but_kept_when_unique() -> None:
    data = error_document("[root cause] OOM", worker="a")
    per_worker, copy = record("error-a-1.pb", data), record("error.pb", data)
    assert [f.error_uri for f in collect([copy, per_worker]).failures] == [per_worker.error_uri]
    lone = record("error.pb", error_document("ValueError from an old backend", worker=None))
    assert collect([lone, *sample()[1:2]]).failures[0] == lone


def test_only_the_root_cause_keeps_its_full_message() -> None:
    long_tail = "\n".join(f"frame {i}" for i in range(2000))
    late = record("error-late.pb", error_document("[root cause] late\n" + long_tail, timestamp_ns=BASE_NS + 9))
    early = record("error-early.pb", error_document("[root cause] early\n" + long_tail, timestamp_ns=BASE_NS))
    for order in ([late, early], [early, late]):
        result = collect(order, summary_bytes=512)
        root, other = result.failures
        assert root.error_uri.endswith("error-early.pb") and TRUNCATION_INDICATOR not in root.message
        assert TRUNCATION_INDICATOR in other.message and len(other.message.encode()) < 600


def test_execution_error_of_the_root_cause() -> None:
    result = collect([*sample(), SkippedFile(f"{PREFIX}/error-x.pb", "empty file")])
    outcome = result.execution_error()
    error = outcome.execution_error
    assert error.code == "USER:RuntimeError" and error.message == "[root cause] OOM"
    assert error.worker == "a" and error.error_uri == f"{PREFIX}/error-a-1.pb"
    assert error.kind == execution_pb2.ExecutionError.USER
    assert error.timestamp.seconds * 10**9 + error.timestamp.nanos == BASE_NS
    assert outcome.is_recoverable is False
    parsed = execution_pb2.ExecutionError()
    parsed.ParseFromString(to_proto_bytes(result))
    assert parsed == error
