"""Propeller-side reader of a distributed task's error files (no flytekit, no torch).

Typical use::

    from backend_reader import RemoteFileOutputReader

    reader = RemoteFileOutputReader("gs://bucket/metadata/.../0", raw_output_prefix=None)
    if reader.is_error():
        outcome = reader.read_error()  # flyteidl ExecutionError + is_recoverable
        for failure in reader.failures():  # every worker, root cause first
            ...

Inside an event loop, await the same calls on ``reader.aio`` (``await reader.aio.read_error()``).
"""

from backend_reader.async_reader import AsyncRemoteFileOutputReader, OutputsError, PayloadTooLargeError
from backend_reader.documents import ErrorKind, FailureRecord, SkippedFile, parse_error_document
from backend_reader.reader import RemoteFileOutputReader
from backend_reader.results import ExecutionErrorResult, ReadResult
from backend_reader.storage import ReaderError, RetryPolicy, StorageError
from backend_reader.strategy import ErrorAggregationStrategy
from rootcause_core.ordering import Role, TimeSource, order_failures, pick_root_cause, root_cause_key

__all__ = [
    "AsyncRemoteFileOutputReader",
    "ErrorAggregationStrategy",
    "ErrorKind",
    "ExecutionErrorResult",
    "FailureRecord",
    "OutputsError",
    "PayloadTooLargeError",
    "ReadResult",
    "ReaderError",
    "RemoteFileOutputReader",
    "RetryPolicy",
    "Role",
    "SkippedFile",
    "StorageError",
    "TimeSource",
    "order_failures",
    "parse_error_document",
    "pick_root_cause",
    "root_cause_key",
]
