"""Listing and reading objects on any fsspec store, concurrently, with retries and clear errors.

Object stores are reached through fsspec's async filesystems (gcsfs and s3fs are async), created
inside the caller's event loop and closed when the :class:`Storage` context ends, so the reader
works from a caller's loop as well as from ``asyncio.run``. Synchronous filesystems (a local
folder) run in threads via ``asyncio.to_thread``.

Errors fall in three groups:

- transient (connection reset, timeout, HTTP 408/429/5xx): retried with exponential backoff and
  jitter, by the client library where it does so (gcsfs, s3fs), else by :class:`RetryPolicy`;
- "cannot work here at all" (permission denied, bucket missing, retries exhausted): one
  :class:`StorageError` saying what failed and where, raised to the caller;
- a single object gone between listing and reading: ``FileNotFoundError``, left to the caller,
  which skips that file.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, TypeVar

from fsspec.asyn import AsyncFileSystem

from backend_reader.filesystems import filesystem_class
from backend_reader.layout import base_name

T = TypeVar("T")

#: Names of client-library exception classes (anywhere in the MRO) that mean "try again".
_TRANSIENT_EXCEPTION_NAMES = frozenset(
    {
        "ClientConnectionError",
        "ClientConnectorError",
        "ClientPayloadError",
        "ServerDisconnectedError",
        "ServerTimeoutError",
        "EndpointConnectionError",
        "ConnectTimeoutError",
        "ReadTimeoutError",
        "ConnectionClosedError",
        "ChecksumError",
    }
)
_TRANSIENT_STATUS = frozenset({408, 429, 500, 501, 502, 503, 504})


class ReaderError(Exception):
    """Base of every error the reader raises on purpose."""


class StorageError(ReaderError):
    """The store cannot be read here: permission denied, bucket missing, or retries exhausted."""


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter for transient storage errors."""

    attempts: int = 4
    base_delay_s: float = 0.1
    max_delay_s: float = 2.0

    def delay_s(self, attempt: int) -> float:
        """Seconds to wait before retry number ``attempt`` (1-based)."""
        return random.uniform(0, min(self.max_delay_s, self.base_delay_s * 2 ** (attempt - 1)))


#: Protocols whose client library already retries transient errors with backoff (gcsfs: 6 tries,
#: up to 32 s apart; s3fs and botocore: several each). Retrying on top would multiply the wait.
SELF_RETRYING_PROTOCOLS = frozenset({"gs", "gcs", "s3", "s3a"})


def default_retry_policy(protocol: str) -> RetryPolicy:
    """Our retries where the client has none; none of ours where the client retries itself."""
    if protocol in SELF_RETRYING_PROTOCOLS:
        return RetryPolicy(attempts=1)
    return RetryPolicy()


@dataclasses.dataclass(frozen=True)
class ObjectInfo:
    """An object found by a listing: its store path (no protocol), base name and size."""

    path: str
    name: str
    size: int


def is_transient(error: BaseException) -> bool:
    """True when retrying the same request may succeed."""
    if isinstance(error, (FileNotFoundError, PermissionError, FileExistsError)):
        return False
    if isinstance(error, (ConnectionError, TimeoutError)):
        return True
    if any(cls.__name__ in _TRANSIENT_EXCEPTION_NAMES for cls in type(error).__mro__):
        return True
    status = getattr(error, "code", None) or getattr(error, "status", None)
    return isinstance(status, int) and status in _TRANSIENT_STATUS


def is_permission_error(error: BaseException) -> bool:
    """Permission problems, including gcsfs's ``OSError("Forbidden: ...")`` for HTTP 403."""
    if isinstance(error, PermissionError):
        return True
    text = str(error)
    return "Forbidden" in text or "AccessDenied" in text


class Storage:
    """One store (the protocol of a prefix URL), opened for the duration of an ``async with``."""

    def __init__(
        self,
        protocol: str,
        storage_options: dict[str, Any] | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.protocol = protocol
        self.storage_options = dict(storage_options or {})
        self.retry = retry or default_retry_policy(protocol)
        self._fs: Any = None
        self._closer: Any = None

    @classmethod
    def for_url(
        cls, url: str, storage_options: dict[str, Any] | None = None, retry: RetryPolicy | None = None
    ) -> Storage:
        protocol = url.split("://", 1)[0] if "://" in url else "file"
        return cls(protocol, storage_options, retry)

    async def __aenter__(self) -> Storage:
        try:
            fs_class = filesystem_class(self.protocol)
        except (ValueError, ImportError) as error:
            raise StorageError(f"cannot open storage '{self.protocol}://': {error}") from error
        options = {"skip_instance_cache": True, **self.storage_options}
        try:
            if getattr(fs_class, "async_impl", False):
                self._fs = fs_class(asynchronous=True, **options)
                self._closer = await self._open_session(self._fs)
            else:
                self._fs = fs_class(**options)
        except (OSError, ValueError, TypeError) as error:
            raise StorageError(f"cannot open storage '{self.protocol}://': {error}") from error
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        closer, self._closer = self._closer, None
        if closer is not None and hasattr(closer, "close"):
            # closing a session must never hide the real result of the work done with it
            with contextlib.suppress(Exception):
                await closer.close()

    @staticmethod
    async def _open_session(fs: Any) -> Any:
        """Create the client session in the running loop; return what must be closed at the end."""
        for name in ("set_session", "_set_session"):
            opener = getattr(fs, name, None)
            if opener is not None:
                return await opener()
        return None

    @property
    def is_async(self) -> bool:
        return isinstance(self._fs, AsyncFileSystem)

    def strip(self, url: str) -> str:
        """The store path of a URL, as the filesystem names it (no protocol)."""
        return str(self._fs._strip_protocol(url))

    async def _call(self, what: str, where: str, call: Callable[[], Awaitable[T]]) -> T:
        """Run one request with retries; translate permanent failures into StorageError."""
        attempt = 0
        while True:
            attempt += 1
            try:
                return await call()
            except FileNotFoundError:
                raise
            except Exception as error:
                if is_transient(error) and attempt < self.retry.attempts:
                    await asyncio.sleep(self.retry.delay_s(attempt))
                    continue
                raise self._storage_error(what, where, error, attempt) from error

    @staticmethod
    def _storage_error(what: str, where: str, error: BaseException, attempts: int) -> StorageError:
        detail = " ".join(str(error).split()) or type(error).__name__
        if is_permission_error(error):
            return StorageError(f"permission denied {what} {where}: {detail}")
        if is_transient(error):
            return StorageError(f"{what} {where} failed after {attempts} attempts: {detail}")
        return StorageError(f"{what} {where} failed: {type(error).__name__}: {detail}")

    async def list_folder(self, folder_url: str, name_prefix: str = "") -> list[ObjectInfo]:
        """Objects directly in ``folder_url`` whose base name starts with ``name_prefix``.

        A folder that does not exist is empty (object stores have no folders); a bucket that does
        not exist is a :class:`StorageError`. The name prefix is sent to the server where the
        filesystem supports it, so a listing pages only over candidate files.
        """
        folder = self.strip(folder_url).rstrip("/")
        try:
            entries = await self._call("listing", folder_url, lambda: self._list_raw(folder, name_prefix))
        except FileNotFoundError:
            await self._check_bucket(folder_url)
            return []
        found = []
        for entry in entries:
            if entry.get("type", "file") != "file":
                continue
            path = str(entry["name"]).rstrip("/")
            name = base_name(path)
            if path.rsplit("/", 1)[0] != folder or not name.startswith(name_prefix):
                continue
            found.append(ObjectInfo(path=path, name=name, size=int(entry.get("size") or 0)))
        return found

    async def _list_raw(self, folder: str, name_prefix: str) -> list[dict[str, Any]]:
        fs = self._fs
        if self.protocol in ("gs", "gcs"):
            return list(await fs._ls(folder, detail=True, prefix=name_prefix, refresh=True))
        if self.protocol in ("s3", "s3a"):
            # s3fs's _ls lists the parent folder when a prefix is empty; _lsdir does not.
            return list(await fs._lsdir(folder, refresh=True, prefix=name_prefix))
        if self.is_async:
            return list(await fs._ls(folder, detail=True, refresh=True))
        return list(await asyncio.to_thread(fs.ls, folder, detail=True))

    async def _check_bucket(self, folder_url: str) -> None:
        """Raise StorageError when the bucket of an empty listing does not exist."""
        if self.protocol == "file" or not self.is_async:
            return
        bucket = self.strip(folder_url).split("/", 1)[0]
        try:
            await self._call("checking bucket of", folder_url, lambda: self._fs._info(bucket))
        except FileNotFoundError as error:
            raise StorageError(
                f"bucket '{bucket}' does not exist ({self.protocol}://{bucket}, listing {folder_url})"
            ) from error

    async def read(self, path: str) -> bytes:
        """Whole content of one object (a store path from a listing)."""
        uri = f"{self.protocol}://{path}"
        if self.protocol in ("s3", "s3a"):
            # s3fs HEADs every object first to decide on ranged parallel reads; the listing
            # already gave the size and error files are small, so one GET is enough.
            return bytes(await self._call("reading", uri, lambda: self._fs._cat_file(path, max_concurrency=1)))
        if self.is_async:
            return bytes(await self._call("reading", uri, lambda: self._fs._cat_file(path)))
        return bytes(await self._call("reading", uri, lambda: asyncio.to_thread(self._fs.cat_file, path)))

    async def size(self, url: str) -> int | None:
        """Size of one object, ``None`` when it does not exist (a HEAD, as Go's ``Exists``)."""
        path = self.strip(url)
        try:
            if self.is_async:
                info = await self._call("checking", url, lambda: self._fs._info(path))
            else:
                info = await self._call("checking", url, lambda: asyncio.to_thread(self._fs.info, path))
        except FileNotFoundError:
            return None
        if info.get("type", "file") != "file":
            return None
        return int(info.get("size") or 0)
