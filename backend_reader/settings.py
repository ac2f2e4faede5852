"""What a reader reads and within which limits: one prefix, one strategy, the bounds on memory and waiting.

Kept apart from the reading itself so the synchronous reader (:mod:`backend_reader.reader`) and its
asynchronous twin (:mod:`backend_reader.async_reader`) take the same arguments, checked once.
"""

from __future__ import annotations

from typing import Any

from backend_reader.aggregate import DEFAULT_SUMMARY_BYTES
from backend_reader.messages import MAX_MESSAGE_BYTES
from backend_reader.storage import RetryPolicy
from backend_reader.strategy import ErrorAggregationStrategy

DEFAULT_MAX_PAYLOAD_BYTES = 2 * 1024 * 1024
DEFAULT_MAX_CONCURRENCY = 64
DEFAULT_SETTLE_TIMEOUT_S = 30.0


class ReaderSettings:
    """Where a task attempt's ``outputs.pb`` and error files are, and how to read them.

    Args:
        output_prefix: the attempt's output folder (``gs://``, ``s3://`` URL or a local path).
        strategy: ``DEFAULT`` reads only ``error.pb``; ``EARLIEST`` every ``error*.pb`` there and,
            with ``raw_output_prefix``, every ``<raw_output_prefix>/errors/*.pb``.
        max_payload_bytes: larger files are skipped (error files) or refused (``outputs.pb``).
        storage_options: passed to the fsspec filesystem (credentials, ``endpoint_url``...).
        max_concurrency: requests in flight at once.
        expected_workers, settle_timeout: wait for late files: poll the listing until that many
            error files exist or ``settle_timeout`` seconds pass.
        retry: our retry policy; by default none where the client library retries itself
            (gcsfs, s3fs) and 4 attempts elsewhere.
        message_limit_bytes: the root cause's message is cut to this, head and tail (propeller's).
        summary_bytes: every other failure's message is cut to this, to bound memory.
    """

    def __init__(
        self,
        output_prefix: str,
        *,
        strategy: ErrorAggregationStrategy = ErrorAggregationStrategy.EARLIEST,
        raw_output_prefix: str | None = None,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        storage_options: dict[str, Any] | None = None,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
        expected_workers: int | None = None,
        settle_timeout: float = DEFAULT_SETTLE_TIMEOUT_S,
        retry: RetryPolicy | None = None,
        message_limit_bytes: int = MAX_MESSAGE_BYTES,
        summary_bytes: int = DEFAULT_SUMMARY_BYTES,
    ) -> None:
        if max_payload_bytes < 1 or max_concurrency < 1:
            raise ValueError("max_payload_bytes and max_concurrency must be at least 1")
        if expected_workers is not None and expected_workers < 1:
            raise ValueError("expected_workers must be at least 1")
        if settle_timeout < 0:
            raise ValueError("settle_timeout must not be negative")
        self.output_prefix = output_prefix.rstrip("/")
        self.strategy = ErrorAggregationStrategy(strategy)
        self.raw_output_prefix = raw_output_prefix.rstrip("/") if raw_output_prefix else None
        self.max_payload_bytes = max_payload_bytes
        self.storage_options = dict(storage_options or {})
        self.max_concurrency = max_concurrency
        self.expected_workers = expected_workers
        self.settle_timeout = settle_timeout
        self.retry = retry
        self.message_limit_bytes = message_limit_bytes
        self.summary_bytes = summary_bytes
