"""``AsyncRemoteFileOutputReader``: propeller's view of a task's outputs and errors, as coroutines.

Flyte's Go reader reads error files one at a time and fails the whole call on one bad file. It breaks
ties by listing order and treats a missing time as 1970. This reader mirrors the Go interface and adds
``failures()``, every failure in root-cause order. It reads concurrently with bounded memory, skips
bad files with a reason, and orders with the shared rule. ``read_error`` downloads only the files
that can still hold the root cause. Nothing is cached, since files may still be arriving.
``docs/backend_reader.md`` has the details.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable

from flyteidl.core import execution_pb2, literals_pb2
from google.protobuf import message as protobuf_message

from backend_reader.aggregate import Collector
from backend_reader.batch_read import BatchReader
from backend_reader.documents import ErrorKind, FailureRecord
from backend_reader.layout import OUTPUTS_FILE_NAME, count_error_files, error_listings, join
from backend_reader.read_plan import RootCauseReadPlan
from backend_reader.results import ExecutionErrorResult, ReadResult
from backend_reader.settings import ReaderSettings
from backend_reader.storage import ObjectInfo, ReaderError, Storage
from backend_reader.strategy import ErrorAggregationStrategy

_FIRST_POLL_S = 0.1
_MAX_POLL_S = 1.0

Listed = list[tuple[str, ObjectInfo]]


class PayloadTooLargeError(ReaderError):
    """``outputs.pb`` is larger than ``max_payload_bytes`` (as Go's ``Exists`` reports)."""


class OutputsError(ReaderError):
    """``outputs.pb`` is missing or is not a ``LiteralMap``."""


class AsyncRemoteFileOutputReader:
    """Reads a task attempt's ``outputs.pb`` and error files as ``settings`` say, from inside an event loop.

    Usually reached as ``RemoteFileOutputReader(...).aio``; the settings are read at each call.
    """

    def __init__(self, settings: ReaderSettings) -> None:
        self.settings = settings

    # ----------------------------------------------------------------- errors

    async def is_error(self) -> bool:
        """True when at least one error file exists (readable or not); does not wait for more."""
        async with self._storage() as storage:
            return bool(await self._list_error_files(storage))

    async def read_all(self) -> ReadResult:
        """One pass over the error files: every failure, every skipped file, waited as configured."""
        return await self._read_settled(self._read_listed)

    async def read_root_cause(self) -> ReadResult:
        """The root cause alone, from as few downloads as the files' names allow.

        Files whose names carry their role and time (``rootcause_core.error_files``) are read only
        while they can still hold the root cause (``backend_reader.read_plan``); the root cause is
        the one reading every file gives. The result's ``failures`` holds only that one (or none),
        and ``skipped`` only the unusable files among those read (all of them when none was usable).
        """
        return await self._read_settled(self._read_root_cause)

    async def read_error(self) -> ExecutionErrorResult:
        """The task's error: the root cause's ``ExecutionError`` (see ``ReadResult.execution_error``),
        as ``read_root_cause`` finds it."""
        return (await self.read_root_cause()).execution_error()

    async def failures(self) -> list[FailureRecord]:
        """Every readable failure, root cause first."""
        return list((await self.read_all()).failures)

    # ---------------------------------------------------------------- outputs

    async def exists(self) -> bool:
        """True when ``outputs.pb`` exists; :class:`PayloadTooLargeError` when it is too large."""
        uri = join(self.settings.output_prefix, OUTPUTS_FILE_NAME)
        async with self._storage() as storage:
            size = await storage.size(uri)
        if size is None:
            return False
        self._refuse_large_outputs(uri, size)
        return True

    async def read(self) -> tuple[literals_pb2.LiteralMap | None, ExecutionErrorResult | None]:
        """``outputs.pb`` as a ``LiteralMap``; or, as Go, an error when it holds no literals.

        The size is checked first, so a huge file is refused rather than downloaded.
        """
        uri = join(self.settings.output_prefix, OUTPUTS_FILE_NAME)
        async with self._storage() as storage:
            size = await storage.size(uri)
            if size is None:  # absent, or no regular file (a local FIFO would block the read for good)
                raise OutputsError(f"outputs not found at {uri}")
            self._refuse_large_outputs(uri, size)
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

    # -------------------------------------------------------------- internals

    def _refuse_large_outputs(self, uri: str, size: int | None) -> None:
        limit = self.settings.max_payload_bytes
        if size is not None and size > limit:
            raise PayloadTooLargeError(f"output file {uri} is too large: {size} bytes, max allowed {limit}")

    def _storage(self) -> Storage:
        return Storage.for_url(self.settings.output_prefix, self.settings.storage_options, self.settings.retry)

    async def _list_error_files(self, storage: Storage) -> Listed:
        """(error URI, object) for every error file of the strategy, sorted by URI."""
        settings = self.settings
        specs = error_listings(settings.output_prefix, settings.raw_output_prefix, settings.strategy)
        listings = await asyncio.gather(*(storage.list_folder(spec.folder, spec.name_prefix) for spec in specs))
        found = {
            join(spec.folder, info.name): info
            for spec, listing in zip(specs, listings, strict=True)
            for info in listing
            if spec.accepts(info.name)
        }
        return sorted(found.items())

    async def _settle(self, storage: Storage, listed: Listed) -> Listed:
        """Poll the listing until ``expected_workers`` files exist or ``settle_timeout`` passes."""
        expected = self.settings.expected_workers
        if expected is None:
            return listed
        if self.settings.strategy == ErrorAggregationStrategy.DEFAULT:
            expected = 1  # only error.pb is read: one file is all there can be
        deadline = time.monotonic() + self.settings.settle_timeout
        pause = _FIRST_POLL_S
        while count_error_files([uri for uri, _ in listed], self.settings.output_prefix) < expected:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            await asyncio.sleep(min(pause, remaining))
            pause = min(pause * 2, _MAX_POLL_S)
            listed = await self._list_error_files(storage)
        return listed

    async def _read_settled(self, read: Callable[[Storage, Listed], Awaitable[ReadResult]]) -> ReadResult:
        """List the error files, wait for late ones as configured, then ``read`` what was listed."""
        async with self._storage() as storage:
            listed = await self._list_error_files(storage)
            listed = await self._settle(storage, listed)
            return await read(storage, listed)

    async def _read_listed(self, storage: Storage, listed: Listed) -> ReadResult:
        """Read every listed file."""
        reads = self._batch_reader(storage, listed)
        await reads.read(reads.readable)
        return reads.result()

    async def _read_root_cause(self, storage: Storage, listed: Listed) -> ReadResult:
        """Read only what can still hold the root cause (see ``read_root_cause``)."""
        reads = self._batch_reader(storage, listed)
        plan = RootCauseReadPlan(reads.readable)
        failures: list[FailureRecord] = []
        while batch := plan.next_batch(failures, reads.collector.best):
            failures = await reads.read(batch)
        result = reads.result()
        return dataclasses.replace(result, failures=result.failures[:1])

    def _batch_reader(self, storage: Storage, listed: Listed) -> BatchReader:
        settings = self.settings
        collector = Collector(settings.output_prefix, error_files=len(listed), summary_bytes=settings.summary_bytes)
        return BatchReader(
            storage, collector, listed, settings.max_payload_bytes, settings.max_concurrency,
            settings.message_limit_bytes,
        )
