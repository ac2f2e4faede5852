"""What a read produces (``backend_reader.results``): the root cause's flyteidl ``ExecutionError`` and, when no
file is usable, the errors Flyte's Go reader makes up (not found, bad format)."""

from __future__ import annotations

from flyteidl.core import execution_pb2

from backend_reader.documents import ErrorKind, FailureRecord, SkippedFile
from backend_reader.results import (
    ERROR_FILE_BAD_FORMAT,
    ERROR_FILE_NOT_FOUND,
    ReadResult,
    failure_to_execution_error,
)
from rootcause_core.ordering import Role, TimeSource
from rootcause_core.timestamps import from_protobuf
from testbed.reader_support import BASE_NS

PREFIX = "gs://bucket/out"


def failure(worker: str, timestamp_ns: int | None = BASE_NS, **fields: object) -> FailureRecord:
    values: dict[str, object] = {
        "error_uri": f"{PREFIX}/error-{worker}.pb", "worker": worker, "timestamp_ns": timestamp_ns,
        "role": Role.CANDIDATE, "code": "USER:RuntimeError", "kind": ErrorKind.USER, "recoverable": False,
        "message": f"[root cause] {worker} failed", "time_source": TimeSource.REPORTED,
    }
    values.update(fields)
    return FailureRecord(**values)  # type: ignore[arg-type]


def result(failures: tuple[FailureRecord, ...] = (), skipped: tuple[SkippedFile, ...] = ()) -> ReadResult:
    return ReadResult(PREFIX, failures, skipped, error_files=len(failures) + len(skipped))


def test_made_up_errors_when_nothing_is_usable() -> None:
    none = result()
    assert not none.is_error and none.execution_error().execution_error.code == ERROR_FILE_NOT_FOUND
    bad = result(skipped=tuple(SkippedFile(f"{PREFIX}/error-{i}.pb", "empty file") for i in range(7)))
    outcome = bad.execution_error()
    assert bad.is_error and outcome.is_recoverable
    assert outcome.execution_error.code == ERROR_FILE_BAD_FORMAT
    assert outcome.execution_error.kind == execution_pb2.ExecutionError.SYSTEM
    assert "and 2 more" in outcome.execution_error.message


def test_the_made_up_codes_are_the_go_readers() -> None:
    assert (ERROR_FILE_NOT_FOUND, ERROR_FILE_BAD_FORMAT) == ("ErrorFileNotFound", "ErrorFileBadFormat")


def test_not_found_names_the_prefix_and_carries_no_file_worker_or_time() -> None:
    outcome = result().execution_error()
    error = outcome.execution_error
    assert error.message == f"no error file found under {PREFIX}"
    assert (error.error_uri, error.worker, error.HasField("timestamp")) == ("", "", False)
    assert error.kind == execution_pb2.ExecutionError.SYSTEM and outcome.is_recoverable is True


def test_bad_format_lists_each_skipped_file_and_why_up_to_five() -> None:
    skipped = tuple(SkippedFile(f"{PREFIX}/error-{i}.pb", f"reason {i}") for i in range(5))
    message = result(skipped=skipped).execution_error().execution_error.message
    reasons = "; ".join(f"{PREFIX}/error-{i}.pb: reason {i}" for i in range(5))
    assert message == f"none of the 5 error files under {PREFIX} is usable: {reasons}"
    assert "more" not in message


def test_files_found_make_an_error_even_when_none_is_readable() -> None:
    unreadable = ReadResult(PREFIX, (), (SkippedFile(f"{PREFIX}/error-a.pb", "empty file"),), error_files=1)
    assert (unreadable.is_error, unreadable.root_cause) == (True, None)


def test_the_root_cause_is_the_first_failure_and_wins_over_skipped_files() -> None:
    first, second = failure("a"), failure("b", BASE_NS + 1)
    read = result((first, second), (SkippedFile(f"{PREFIX}/error-x.pb", "empty file"),))
    assert read.root_cause is first
    outcome = read.execution_error()
    assert outcome == failure_to_execution_error(first)
    assert outcome.execution_error.error_uri == f"{PREFIX}/error-a.pb"


def test_a_failures_execution_error_carries_every_field_and_the_exact_time() -> None:
    record = failure("pod-3", BASE_NS + 123_456_789, code="SYSTEM:OOM", kind=ErrorKind.SYSTEM, recoverable=True,
                     message="[root cause] CUDA out of memory")
    outcome = failure_to_execution_error(record)
    error = outcome.execution_error
    assert (error.code, error.message, error.worker) == ("SYSTEM:OOM", "[root cause] CUDA out of memory", "pod-3")
    assert error.error_uri == f"{PREFIX}/error-pod-3.pb"
    assert error.kind == execution_pb2.ExecutionError.SYSTEM
    assert from_protobuf(error.timestamp) == BASE_NS + 123_456_789
    assert outcome.is_recoverable is True


def test_a_failure_without_a_time_has_no_timestamp_field() -> None:
    error = failure_to_execution_error(failure("old", None, kind=ErrorKind.UNKNOWN)).execution_error
    assert not error.HasField("timestamp")
    assert error.kind == execution_pb2.ExecutionError.UNKNOWN
