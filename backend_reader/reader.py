"""``RemoteFileOutputReader``: propeller's view of a task's outputs and errors, for many writers.

Mirrors the interface of Flyte's Go ``ioutils.RemoteFileOutputReader`` (``IsError``,
``ReadError``, ``Exists``, ``Read``) and adds ``failures()``: every worker's failure in
root-cause order. Where Go lists the error files, then HEADs and reads them one at a time, fails
the whole call on one bad file, breaks ties by listing order and treats a missing time as 1970,
this reader:

- lists (server-side name prefix, paginated by the client library) and reads with at most
  ``max_concurrency`` requests in flight; files over ``max_payload_bytes`` are skipped from their
  listed size, before any download, so memory stays near ``max_concurrency * max_payload_bytes``
  plus one short record per failure;
- reports every unusable file in ``skipped`` with a reason and carries on;
- orders with the shared rule (:mod:`rootcause_core.ordering`);
- ``read_error`` (propeller's call) downloads only the files that can still hold the root cause:
  the plugin names each file with its role and time (:mod:`rootcause_core.error_files`), so one
  listing ranks them and one download usually settles it (:mod:`backend_reader.read_plan`); files
  without such a name are always read, and the answer equals reading everything;
- can wait for late files: with ``expected_workers``, it polls the listing until that many error
  files exist or ``settle_timeout`` seconds pass, then decides with what is there.

Every method has an ``async`` twin (``*_async``) for callers inside an event loop; the plain ones
run the twin on a private loop. Nothing is cached between calls: each call looks at the store
again, as files may still be arriving.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any, TypeVar

from flyteidl.core import execution_pb2, literals_pb2
from google.protobuf import message as protobuf_message

from backend_reader.aggregate import DEFAULT_SUMMARY_BYTES, Collector
from backend_reader.documents import ErrorKind, FailureRecord, parse_error_document
from backend_reader.layout import OUTPUTS_FILE_NAME, count_error_files, error_listings, join
from backend_reader.messages import MAX_MESSAGE_BYTES
from backend_reader.read_plan import RootCauseReadPlan
from backend_reader.results import ExecutionErrorResult, ReadResult
from backend_reader.storage import ObjectInfo, ReaderError, RetryPolicy, Storage, StorageError
from backend_reader.strategy import ErrorAggregationStrategy

T = TypeVar("T")

DEFAULT_MAX_PAYLOAD_BYTES = 2 * 1024 * 1024
DEFAULT_MAX_CONCURRENCY = 64
DEFAULT_SETTLE_TIMEOUT_S = 30.0
_FIRST_POLL_S = 0.1
_MAX_POLL_S = 1.0


class PayloadTooLargeError(ReaderError):
    """``outputs.pb`` is larger than ``max_payload_bytes`` (as Go's ``Exists`` reports)."""


class OutputsError(ReaderError):
    """``outputs.pb`` is missing or is not a ``LiteralMap``."""


class RemoteFileOutputReader:
    """Reads a task attempt's ``outputs.pb`` and error files under ``output_prefix``.

    Args:
        output_prefix: the attempt's output folder (``gs://``, ``s3://`` URL or a local path).
        strategy: ``DEFAULT`` reads only ``error.pb``; ``EARLIEST`` every ``error*.pb`` there and,
            with ``raw_output_prefix``, every ``<raw_output_prefix>/errors/*.pb``.
        max_payload_bytes: larger files are skipped (error files) or refused (``outputs.pb``).
        storage_options: passed to the fsspec filesystem (credentials, ``endpoint_url``...).
        max_concurrency: requests in flight at once.
        expected_workers, settle_timeout: wait for late files (see the module docstring).
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

    # ----------------------------------------------------------------- errors

    async def is_error_async(self) -> bool:
        """True when at least one error file exists (readable or not); does not wait for more."""
        async with self._storage() as storage:
            return bool(await self._list_error_files(storage))

    async def read_all_async(self) -> ReadResult:
        """One pass over the error files: every failure, every skipped file, waited as configured."""
        return await self._read_settled(self._read_listed)

    async def read_root_cause_async(self) -> ReadResult:
        """The root cause alone, from as few downloads as the files' names allow.

        Files whose names carry their role and time (``rootcause_core.error_files``) are read only
        while they can still hold the root cause (``backend_reader.read_plan``); the root cause is
        the one reading every file gives. The result's ``failures`` holds only that one (or none),
        and ``skipped`` only the unusable files among those read (all of them when none was usable).
        """
        return await self._read_settled(self._read_root_cause)

    async def read_error_async(self) -> ExecutionErrorResult:
        """The task's error: the root cause's ``ExecutionError`` (see ``ReadResult.execution_error``),
        as ``read_root_cause_async`` finds it."""
        return (await self.read_root_cause_async()).execution_error()

    async def failures_async(self) -> list[FailureRecord]:
        """Every readable failure, root cause first."""
        return list((await self.read_all_async()).failures)

    # ---------------------------------------------------------------- outputs

    async def exists_async(self) -> bool:
        """True when ``outputs.pb`` exists; :class:`PayloadTooLargeError` when it is too large."""
        uri = join(self.output_prefix, OUTPUTS_FILE_NAME)
        async with self._storage() as storage:
            size = await storage.size(uri)
        if size is None:
            return False
        self._refuse_large_outputs(uri, size)
        return True

    async def read_async(self) -> tuple[literals_pb2.LiteralMap | None, ExecutionErrorResult | None]:
        """``outputs.pb`` as a ``LiteralMap``; or, as Go, an error when it holds no literals.

        The size is checked first, so a huge file is refused rather than downloaded.
        """
        uri = join(self.output_prefix, OUTPUTS_FILE_NAME)
        async with self._storage() as storage:
            self._refuse_large_outputs(uri, await storage.size(uri))
            try:
                data = await storage.read(storage.strip(uri))
            except FileNotFoundError as error:
                raise OutputsError(f"outputs not found at {uri}") from error
        outputs = literals_pb2.LiteralMap()
        try:
            outputs.ParseFromString(data)
        except (protobuf_message.DecodeError, ValueError) as error:
            raise OutputsError(f"outputs at {uri} are not a LiteralMap: {error}") from error
        if not outputs.literals:
            no_outputs = execution_pb2.ExecutionError(
                code="No outputs produced",
                message=f"outputs not found at [{uri}]",
                kind=ErrorKind.UNKNOWN.proto_value,
            )
            return None, ExecutionErrorResult(no_outputs, is_recoverable=True)
        return outputs, None

    # ------------------------------------------------------------- sync twins

    def is_error(self) -> bool:
        return _run(self.is_error_async)

    def read_all(self) -> ReadResult:
        return _run(self.read_all_async)

    def read_root_cause(self) -> ReadResult:
        return _run(self.read_root_cause_async)

    def read_error(self) -> ExecutionErrorResult:
        return _run(self.read_error_async)

    def failures(self) -> list[FailureRecord]:
        return _run(self.failures_async)

    def exists(self) -> bool:
        return _run(self.exists_async)

    def read(self) -> tuple[literals_pb2.LiteralMap | None, ExecutionErrorResult | None]:
        return _run(self.read_async)

    # -------------------------------------------------------------- internals

    def _refuse_large_outputs(self, uri: str, size: int | None) -> None:
        if size is not None and size > self.max_payload_bytes:
            raise PayloadTooLargeError(
                f"output file {uri} is too large: {size} bytes, max allowed {self.max_payload_bytes}"
            )

    def _storage(self) -> Storage:
        return Storage.for_url(self.output_prefix, self.storage_options, self.retry)

    async def _list_error_files(self, storage: Storage) -> list[tuple[str, ObjectInfo]]:
        """(error URI, object) for every error file of the strategy, sorted by URI."""
        specs = error_listings(self.output_prefix, self.raw_output_prefix, self.strategy)
        listings = await asyncio.gather(*(storage.list_folder(spec.folder, spec.name_prefix) for spec in specs))
        found = {
            join(spec.folder, info.name): info
            for spec, listing in zip(specs, listings, strict=True)
            for info in listing
            if spec.accepts(info.name)
        }
        return sorted(found.items())

    async def _settle(self, storage: Storage, listed: list[tuple[str, ObjectInfo]]) -> list[tuple[str, ObjectInfo]]:
        """Poll the listing until ``expected_workers`` files exist or ``settle_timeout`` passes."""
        expected = self.expected_workers
        if expected is None:
            return listed
        if self.strategy == ErrorAggregationStrategy.DEFAULT:
            expected = 1  # only error.pb is read: one file is all there can be
        deadline = time.monotonic() + self.settle_timeout
        pause = _FIRST_POLL_S
        while count_error_files([uri for uri, _ in listed], self.output_prefix) < expected:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            await asyncio.sleep(min(pause, remaining))
            pause = min(pause * 2, _MAX_POLL_S)
            listed = await self._list_error_files(storage)
        return listed

    async def _read_settled(
        self, read: Callable[[Storage, list[tuple[str, ObjectInfo]]], Awaitable[ReadResult]]
    ) -> ReadResult:
        """List the error files, wait for late ones as configured, then ``read`` what was listed."""
        async with self._storage() as storage:
            listed = await self._list_error_files(storage)
            listed = await self._settle(storage, listed)
            return await read(storage, listed)

    async def _read_listed(self, storage: Storage, listed: list[tuple[str, ObjectInfo]]) -> ReadResult:
        """Read every listed file."""
        reads = self._batch_reader(storage, listed)
        await reads.read(reads.readable)
        return reads.result()

    async def _read_root_cause(self, storage: Storage, listed: list[tuple[str, ObjectInfo]]) -> ReadResult:
        """Read only what can still hold the root cause (see ``read_root_cause_async``)."""
        reads = self._batch_reader(storage, listed)
        plan = RootCauseReadPlan(reads.readable)
        failures: list[FailureRecord] = []
        while batch := plan.next_batch(failures, reads.collector.best):
            failures = await reads.read(batch)
        result = reads.result()
        return dataclasses.replace(result, failures=result.failures[:1])

    def _batch_reader(self, storage: Storage, listed: list[tuple[str, ObjectInfo]]) -> _BatchReader:
        collector = Collector(self.output_prefix, error_files=len(listed), summary_bytes=self.summary_bytes)
        return _BatchReader(
            storage, collector, listed, self.max_payload_bytes, self.max_concurrency, self.message_limit_bytes
        )


class _BatchReader:
    """Downloads and parses batches of listed error files into one :class:`Collector`.

    Files over ``max_payload_bytes`` are skipped from their listed size up front (``readable`` is
    the rest). If every download attempted fails with a storage error, the store failed us, not
    the files, and :meth:`result` raises that error instead of reporting files as skipped.
    """

    def __init__(
        self,
        storage: Storage,
        collector: Collector,
        listed: list[tuple[str, ObjectInfo]],
        max_payload_bytes: int,
        max_concurrency: int,
        message_limit_bytes: int,
    ) -> None:
        self.storage = storage
        self.collector = collector
        self.max_payload_bytes = max_payload_bytes
        self.max_concurrency = max_concurrency
        self.message_limit_bytes = message_limit_bytes
        self.readable: list[tuple[str, ObjectInfo]] = []
        for uri, info in listed:
            if info.size > max_payload_bytes:
                collector.skip(uri, f"too large: {info.size} bytes, over the {max_payload_bytes}-byte limit")
            else:
                self.readable.append((uri, info))
        self._attempted = 0
        self._storage_errors: list[StorageError] = []

    async def read(self, batch: list[tuple[str, ObjectInfo]]) -> list[FailureRecord]:
        """Read a batch concurrently; returns the failures parsed from it (skips go to the collector)."""
        failures: list[FailureRecord] = []

        async def read_one(item: tuple[str, ObjectInfo]) -> None:
            uri, info = item
            try:
                data = await self.storage.read(info.path)
            except FileNotFoundError:
                self.collector.skip(uri, "deleted between listing and reading")
                return
            except StorageError as error:
                self._storage_errors.append(error)
                self.collector.skip(uri, f"could not be read: {error}")
                return
            if len(data) > self.max_payload_bytes:
                self.collector.skip(uri, f"grew to {len(data)} bytes after listing, over the limit")
                return
            outcome = parse_error_document(data, uri, message_limit_bytes=self.message_limit_bytes)
            if isinstance(outcome, FailureRecord):
                failures.append(outcome)
            self.collector.add(outcome)

        self._attempted += len(batch)
        await for_each_bounded(batch, read_one, self.max_concurrency)
        return failures

    def result(self) -> ReadResult:
        if self._attempted and len(self._storage_errors) == self._attempted:
            raise self._storage_errors[0]  # the store failed us, not the files
        return self.collector.result()


async def for_each_bounded(items: Iterable[T], work: Callable[[T], Awaitable[None]], limit: int) -> None:
    """Run ``work`` on every item with at most ``limit`` running at once.

    ``limit`` workers pull from one iterator, so only ``limit`` coroutines (and payloads) exist at
    any time however many items there are; the first exception cancels the rest.
    """
    iterator = iter(items)

    async def worker() -> None:
        for item in iterator:
            await work(item)

    try:
        async with asyncio.TaskGroup() as group:
            for _ in range(limit):
                group.create_task(worker())
    except BaseExceptionGroup as failed:  # callers expect the error itself, not a group of one
        raise failed.exceptions[0] from None


def _run(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine to completion from synchronous code, even inside a running loop's thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = asyncio.run(make())
        except BaseException as error:
            outcome["error"] = error

    thread = threading.Thread(target=target, name="rootcause-reader")
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
