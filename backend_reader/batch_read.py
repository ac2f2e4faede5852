"""Downloading and parsing listed error files in bounded concurrent batches.

The reader decides *which* files to read (all, or the root-cause plan's batches); this module only
reads them, keeping at most ``max_concurrency`` downloads (and payloads) in memory at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

from backend_reader.aggregate import Collector
from backend_reader.documents import FailureRecord, parse_error_document
from backend_reader.results import ReadResult
from backend_reader.storage import ObjectInfo, Storage, StorageError

T = TypeVar("T")


class BatchReader:
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
