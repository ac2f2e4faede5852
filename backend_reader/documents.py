"""Parse and validate one error file into a failure record, or say why it was skipped.

Object stores hold what anyone wrote. So every way a file can be wrong ends in a :class:`SkippedFile`
with a reason, never an exception. Protobuf parses many byte strings. So a few heuristics tell a
foreign message from an ``ErrorDocument``, and a real writer never trips them. A real writer's document
is never refused for its strings. They are made safe for showing instead. It is pure: bytes in, record
out, so it is tested without storage. ``docs/backend_reader.md`` lists the checks.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import re

from flyteidl.core import errors_pb2, execution_pb2
from google.protobuf import message as protobuf_message
from google.protobuf import unknown_fields

from backend_reader.messages import MAX_MESSAGE_BYTES, cut_message
from rootcause_core.error_files import ListingKey, content_listing_key
from rootcause_core.ordering import Role, TimeSource
from rootcause_core.roles import rank_from_report
from rootcause_core.safe_text import safe_line, safe_text
from rootcause_core.timestamps import document_time_ns

# C0 controls other than TAB, LF, CR and ESC (ANSI colours are common in tracebacks): a nested
# protobuf's field tags and lengths, when a foreign message is read as an ErrorDocument.
_BINARY_CHARS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f]")


class ErrorKind(enum.StrEnum):
    """Who is to blame, as Flyte's ``ExecutionError.ErrorKind`` (``ContainerError.origin``)."""

    UNKNOWN = "UNKNOWN"
    USER = "USER"
    SYSTEM = "SYSTEM"

    @property
    def proto_value(self) -> int:
        return int(execution_pb2.ExecutionError.ErrorKind.Value(self.value))


@dataclasses.dataclass(frozen=True)
class FailureRecord:
    """One worker's failure as read from its error file; satisfies ``ordering.OrderableFailure``.

    Everything a report or a timeline needs is here, so callers never re-read the file.
    ``message`` is cut to propeller's 100 KiB (head and tail); in a large aggregation the reader
    may shorten it further for every failure but the root cause (see ``reader.py``).
    ``timestamp_ns`` is ``None`` for files written without a time (older flytekit), and such a
    failure sorts after every timed one.
    """

    error_uri: str
    worker: str
    timestamp_ns: int | None
    role: Role
    code: str
    kind: ErrorKind
    recoverable: bool
    message: str
    time_source: TimeSource
    global_rank: int | None = None
    fingerprint: str = dataclasses.field(default="", repr=False, compare=False)

    @property
    def source(self) -> str:
        """The last tie-breaker of the ordering rule: the file's URI."""
        return self.error_uri


@dataclasses.dataclass(frozen=True)
class SkippedFile:
    """An error file that could not be used, and why (shown to users as is)."""

    error_uri: str
    reason: str


def parse_error_document(
    data: bytes, error_uri: str, *, message_limit_bytes: int = MAX_MESSAGE_BYTES
) -> FailureRecord | SkippedFile:
    """Turn the bytes of one error file into a :class:`FailureRecord` or a :class:`SkippedFile`."""
    if not data:
        return SkippedFile(error_uri, "empty file")
    document = errors_pb2.ErrorDocument()
    try:
        document.ParseFromString(data)
    except (protobuf_message.DecodeError, ValueError, RuntimeError) as error:
        return SkippedFile(error_uri, f"not a protobuf ErrorDocument (corrupt or truncated): {error}")
    problem = _foreign_document_problem(document)
    if problem is not None:
        return SkippedFile(error_uri, f"not a Flyte ErrorDocument: {problem}")
    error = document.error
    try:
        stamped_ns = document_time_ns(error.timestamp if error.HasField("timestamp") else None)
    except ValueError as time_problem:
        return SkippedFile(error_uri, str(time_problem))
    message = safe_text(error.message)
    # role and time are the listing key's rule, which the pod applies to the fields it writes
    key = content_listing_key(message, stamped_ns)
    timestamp_ns = key.timestamp_ns
    return FailureRecord(
        error_uri=error_uri,
        worker=safe_line(error.worker),
        timestamp_ns=timestamp_ns,
        role=key.role,
        code=safe_line(error.code),
        kind=ErrorKind(execution_pb2.ExecutionError.ErrorKind.Name(error.origin)),
        recoverable=error.kind == errors_pb2.ContainerError.RECOVERABLE,
        message=cut_message(message, message_limit_bytes),
        time_source=TimeSource.UNKNOWN if timestamp_ns is None else TimeSource.REPORTED,
        global_rank=rank_from_report(message),
        fingerprint=_fingerprint(error),
    )


def _foreign_document_problem(document: errors_pb2.ErrorDocument) -> str | None:
    if len(unknown_fields.UnknownFieldSet(document)):
        return "unknown fields in the document"
    if not document.HasField("error"):
        return "no ContainerError in the document"
    error = document.error
    if len(unknown_fields.UnknownFieldSet(error)) or len(unknown_fields.UnknownFieldSet(error.timestamp)):
        return "unknown fields in the ContainerError"
    if not error.code and not error.message:
        return "the ContainerError has neither a code nor a message"
    if error.origin not in execution_pb2.ExecutionError.ErrorKind.values():
        return f"unknown error origin {error.origin}"
    if error.kind not in errors_pb2.ContainerError.Kind.values():
        return f"unknown error kind {error.kind}"
    if _only_code_and_message(error):
        for name, text in (("code", error.code), ("message", error.message)):
            if _BINARY_CHARS.search(text):
                return f"binary data in the {name}"
    return None


def _only_code_and_message(error: errors_pb2.ContainerError) -> bool:
    """Nothing but fields 1 and 2 set: what any protobuf whose field 1 is a message (a map, such as
    ``outputs.pb``'s ``LiteralMap``) reads as. Every Flyte writer also sets an origin."""
    return (
        error.origin == execution_pb2.ExecutionError.UNKNOWN
        and error.kind == errors_pb2.ContainerError.NON_RECOVERABLE
        and not error.HasField("timestamp")
        and not error.worker
    )


def _fingerprint(error: errors_pb2.ContainerError) -> str:
    """Digest of the document's content, to recognise the ``error.pb`` copy of a worker's file."""
    return hashlib.sha256(error.SerializeToString(deterministic=True)).hexdigest()


def listing_key_for(document: bytes) -> ListingKey | None:
    """The listing key of a serialized ``ErrorDocument``, as the reader will see it; ``None`` when the
    reader would skip the document (then the file gets a plain name and is simply read).

    For bytes only (tests, benchmarks, tools that name files they did not write): a pod knows the
    fields it writes and applies the same rule to them (``rootcause_core.error_files``, which holds
    the rule and the name format) without parsing its own document.
    """
    parsed = parse_error_document(document, "")
    if not isinstance(parsed, FailureRecord):
        return None
    return ListingKey(parsed.role, parsed.timestamp_ns)
