"""What a read produces: every failure in root-cause order, the skipped files, and the one
Flyte ``ExecutionError`` propeller records, as Go's ``io.ExecutionError`` (proto + recoverable).
"""

from __future__ import annotations

import dataclasses

from flyteidl.core import execution_pb2

from backend_reader.documents import ErrorKind, FailureRecord, SkippedFile
from rootcause_core.timestamps import to_protobuf

#: Codes of the errors the reader makes up itself, the same as Flyte's Go reader uses.
ERROR_FILE_NOT_FOUND = "ErrorFileNotFound"
ERROR_FILE_BAD_FORMAT = "ErrorFileBadFormat"

_MAX_LISTED_SKIPS = 5


@dataclasses.dataclass(frozen=True)
class ExecutionErrorResult:
    """flyteidl ``core.ExecutionError`` plus whether a retry may help (Go's ``io.ExecutionError``).

    flyteidl 1.16's ``ExecutionError`` has code, message, error_uri, kind, timestamp and worker
    but no recoverability field, so it travels next to the proto, as in Go.
    """

    execution_error: execution_pb2.ExecutionError
    is_recoverable: bool


@dataclasses.dataclass(frozen=True)
class ReadResult:
    """One aggregation of a task's error files.

    ``error_files`` counts the error files found (readable or not): any means the task failed.
    """

    output_prefix: str
    failures: tuple[FailureRecord, ...]
    skipped: tuple[SkippedFile, ...]
    error_files: int

    @property
    def is_error(self) -> bool:
        return self.error_files > 0

    @property
    def root_cause(self) -> FailureRecord | None:
        return self.failures[0] if self.failures else None

    def execution_error(self) -> ExecutionErrorResult:
        """The error to record for the task (what ``read_error`` returns).

        The root cause when there is one; otherwise the error Flyte's Go reader makes up: the
        error file was not found, or none could be parsed (naming the skipped files and why).
        Both made-up errors are SYSTEM and recoverable, as in Go, since a retry may fix them.
        """
        root = self.root_cause
        if root is not None:
            return failure_to_execution_error(root)
        if not self.skipped:
            message = f"no error file found under {self.output_prefix}"
            return _made_up_error(ERROR_FILE_NOT_FOUND, message)
        reasons = "; ".join(f"{skip.error_uri}: {skip.reason}" for skip in self.skipped[:_MAX_LISTED_SKIPS])
        more = len(self.skipped) - _MAX_LISTED_SKIPS
        if more > 0:
            reasons += f"; and {more} more"
        message = f"none of the {len(self.skipped)} error files under {self.output_prefix} is usable: {reasons}"
        return _made_up_error(ERROR_FILE_BAD_FORMAT, message)


def failure_to_execution_error(failure: FailureRecord) -> ExecutionErrorResult:
    """The flyteidl ``ExecutionError`` for one failure (``error_uri`` names its file)."""
    error = execution_pb2.ExecutionError(
        code=failure.code,
        message=failure.message,
        error_uri=failure.error_uri,
        kind=failure.kind.proto_value,
        worker=failure.worker,
    )
    if failure.timestamp_ns is not None:
        error.timestamp.CopyFrom(to_protobuf(failure.timestamp_ns))
    return ExecutionErrorResult(error, failure.recoverable)


def _made_up_error(code: str, message: str) -> ExecutionErrorResult:
    error = execution_pb2.ExecutionError(code=code, message=message, kind=ErrorKind.SYSTEM.proto_value)
    return ExecutionErrorResult(error, is_recoverable=True)
