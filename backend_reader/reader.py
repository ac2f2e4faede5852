"""``RemoteFileOutputReader``: propeller's reader of a task's outputs and errors, for synchronous callers.

The calls keep the names of Flyte's Go ``ioutils.RemoteFileOutputReader`` (``is_error``,
``read_error``, ``exists``, ``read``) plus ``failures()`` and the ``ReadResult`` readers. The
reading itself lives in :mod:`backend_reader.async_reader` (how files are listed, waited for and
read); each call here runs that coroutine to completion on a private loop, so it works inside a
running loop's thread too. Callers with an event loop await ``reader.aio.<call>()`` instead.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from flyteidl.core import literals_pb2

from backend_reader.async_reader import AsyncRemoteFileOutputReader, OutputsError, PayloadTooLargeError
from backend_reader.documents import FailureRecord
from backend_reader.results import ExecutionErrorResult, ReadResult
from backend_reader.settings import ReaderSettings

__all__ = ["OutputsError", "PayloadTooLargeError", "RemoteFileOutputReader"]

T = TypeVar("T")


class RemoteFileOutputReader(ReaderSettings):
    """Reads a task attempt's ``outputs.pb`` and error files under ``output_prefix``.

    Takes :class:`~backend_reader.settings.ReaderSettings`' arguments; each call is documented on
    its coroutine twin in :class:`~backend_reader.async_reader.AsyncRemoteFileOutputReader`.
    """

    @property
    def aio(self) -> AsyncRemoteFileOutputReader:
        """The same calls as coroutines, for callers inside an event loop."""
        return AsyncRemoteFileOutputReader(self)

    def is_error(self) -> bool:
        return _run(self.aio.is_error)

    def read_all(self) -> ReadResult:
        return _run(self.aio.read_all)

    def read_root_cause(self) -> ReadResult:
        return _run(self.aio.read_root_cause)

    def read_error(self) -> ExecutionErrorResult:
        return _run(self.aio.read_error)

    def failures(self) -> list[FailureRecord]:
        return _run(self.aio.failures)

    def exists(self) -> bool:
        return _run(self.aio.exists)

    def read(self) -> tuple[literals_pb2.LiteralMap | None, ExecutionErrorResult | None]:
        return _run(self.aio.read)


def _run(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine to completion from synchronous code, even inside a running loop's thread (there
    on a one-call executor's thread: a loop cannot run inside another in one thread)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="rootcause-reader") as one:
        return one.submit(lambda: asyncio.run(make())).result()
