"""Pure tests of ``backend_reader.documents``: error-file parsing and validation, the message cut and role
and time a parsed document gets; the storage layer's transient-error rule."""

from __future__ import annotations

import pytest
from flyteidl.core import errors_pb2, execution_pb2, literals_pb2
from hypothesis import given, settings
from hypothesis import strategies as st

from backend_reader.documents import ErrorKind, FailureRecord, SkippedFile, parse_error_document
from backend_reader.messages import TRUNCATION_INDICATOR
from backend_reader.storage import is_transient
from rootcause_core.ordering import Role, TimeSource
from rootcause_core.safe_text import safe_line, safe_text
from rootcause_core.testimony import VICTIM_STAMP_DELAY_NS, for_failure, with_testimony
from testbed.reader_support import BASE_NS, error_document

URI = "gs://bucket/out/error-w-1.pb"


def parse(data: bytes) -> FailureRecord | SkippedFile:
    return parse_error_document(data, URI)


def test_new_document_gives_every_field() -> None:
    record = parse(
        error_document(
            "[root cause] ValueError: bad batch",
            code="USER:ValueError",
            worker="pod-3",
            timestamp_ns=BASE_NS + 123_456_789,
            recoverable=True,
            origin=execution_pb2.ExecutionError.SYSTEM,
        )
    )
    assert isinstance(record, FailureRecord)
    assert record.worker == "pod-3"
    assert record.timestamp_ns == BASE_NS + 123_456_789
    assert record.time_source == TimeSource.REPORTED
    assert record.role == Role.CANDIDATE
    assert record.code == "USER:ValueError"
    assert record.kind == ErrorKind.SYSTEM
    assert record.recoverable is True
    assert record.source == URI


def test_old_document_has_no_time_and_no_worker() -> None:
    record = parse(error_document("RuntimeError: boom", worker=None, timestamp_ns=None))
    assert isinstance(record, FailureRecord)
    assert (record.worker, record.timestamp_ns, record.time_source) == ("", None, TimeSource.UNKNOWN)


def test_epoch_zero_timestamp_counts_as_absent() -> None:
    record = parse(error_document(timestamp_ns=0))
    assert isinstance(record, FailureRecord) and record.timestamp_ns is None


@pytest.mark.parametrize(
    ("message", "role"),
    [
        ("[victim] SIGTERM from the agent", Role.VICTIM),
        ("[root cause] CUDA error", Role.CANDIDATE),
        ("RuntimeError: Connection reset by peer", Role.VICTIM),
        ("ZeroDivisionError: division by zero", Role.CANDIDATE),
    ],
)
def test_role_comes_from_the_message(message: str, role: Role) -> None:
    record = parse(error_document(message))
    assert isinstance(record, FailureRecord) and record.role == role


def _literal_map_bytes() -> bytes:
    literal = literals_pb2.Literal(scalar=literals_pb2.Scalar(primitive=literals_pb2.Primitive(integer=3)))
    return literals_pb2.LiteralMap(literals={"o0": literal}).SerializeToString()


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty file"),
        (b"\xff\xfe\x00garbage", "corrupt or truncated"),
        (error_document("a long enough message to cut")[:-7], "corrupt or truncated"),
        (_literal_map_bytes(), "binary data in the message"),
        (errors_pb2.ErrorDocument().SerializeToString() + b"\x12\x00", "unknown fields in the document"),
        (b"\x0a\x00", "neither a code nor a message"),
        (b"\x0a\x05\x0a\x01c\x20\x07", "unknown error origin 7"),
        (b"\x0a\x05\x0a\x01c\x18\x05", "unknown error kind 5"),
        (b"\x0a\x05\x0a\x01c\x28\x07", "unknown fields in the ContainerError"),
    ],
)
def test_bad_files_are_skipped_with_a_reason(data: bytes, reason: str) -> None:
    outcome = parse(data)
    assert isinstance(outcome, SkippedFile)
    assert outcome.error_uri == URI
    assert reason in outcome.reason


@pytest.mark.parametrize(
    "message",
    ["[root cause] ValueError: bad record \x00\x07\x08 end", "\x1b[31mRuntimeError\x1b[0m: \x7f\x85", "\x00"],
)
def test_a_real_writers_document_is_never_refused_for_its_characters(message: str) -> None:
    """Control bytes in a user's exception are escaped; a foreign ``outputs.pb`` is still skipped."""
    record = parse(error_document(message, worker="pod-1"))
    assert isinstance(record, FailureRecord)
    assert record.message == safe_text(message) and "\x00" not in record.message and "\x1b" not in record.message
    assert record.worker == "pod-1"


def test_binary_strings_still_unmask_a_foreign_message() -> None:
    """Code and message alone, with binary data: how any map-shaped protobuf reads, not a document."""
    bare = errors_pb2.ErrorDocument(error=errors_pb2.ContainerError(code="o0", message="\x0a\x02\x10\x03"))
    outcome = parse(bare.SerializeToString())
    assert isinstance(outcome, SkippedFile) and "binary data" in outcome.reason


def test_impossible_timestamp_is_skipped() -> None:
    document = errors_pb2.ErrorDocument()
    document.ParseFromString(error_document())
    document.error.timestamp.nanos = 2_000_000_000
    outcome = parse(document.SerializeToString())
    assert isinstance(outcome, SkippedFile) and "invalid timestamp" in outcome.reason


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=512))
def test_arbitrary_bytes_never_raise(data: bytes) -> None:
    outcome = parse(data)
    assert isinstance(outcome, FailureRecord | SkippedFile)
    if isinstance(outcome, SkippedFile):
        assert outcome.reason


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=200), st.text(max_size=40), st.integers(min_value=-(10**18), max_value=10**18))
def test_arbitrary_valid_documents_parse(message: str, worker: str, offset_ns: int) -> None:
    data = error_document(message or "x", worker=worker, timestamp_ns=BASE_NS + offset_ns)
    outcome = parse(data)
    # A real writer's document is never refused for its strings; they are escaped for showing.
    assert isinstance(outcome, FailureRecord)
    assert outcome.worker == safe_line(worker) and outcome.timestamp_ns == BASE_NS + offset_ns
    assert outcome.message == safe_text(message or "x")


def test_parsing_cuts_long_messages() -> None:
    record = parse(error_document("[root cause] " + "y" * 200_000))
    assert isinstance(record, FailureRecord)
    assert TRUNCATION_INDICATOR in record.message and record.role == Role.CANDIDATE


def test_transient_errors_are_recognised() -> None:
    assert is_transient(ConnectionResetError())
    assert is_transient(TimeoutError())
    assert not is_transient(FileNotFoundError())
    assert not is_transient(PermissionError())
    assert not is_transient(ValueError("bad request"))


def test_a_victims_moved_stamp_is_read_back_as_its_true_time() -> None:
    """A victim pod stamps its document late (for Flyte's earliest-timestamp rule); its testimony
    gives the time it failed, and the reader orders and shows that time."""
    message = with_testimony("[victim] rank 0 ... Connection closed by peer", for_failure(BASE_NS, victim=True))
    record = parse(error_document(message, timestamp_ns=BASE_NS + VICTIM_STAMP_DELAY_NS))
    assert isinstance(record, FailureRecord)
    assert (record.timestamp_ns, record.role) == (BASE_NS, Role.VICTIM)


def test_a_testimony_that_does_not_account_for_the_stamp_is_not_trusted() -> None:
    message = with_testimony("[victim] torn down", for_failure(BASE_NS, victim=True))
    record = parse(error_document(message, timestamp_ns=BASE_NS + 5))
    assert isinstance(record, FailureRecord) and record.timestamp_ns == BASE_NS + 5
