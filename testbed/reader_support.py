"""Helpers shared by the reader tests: real ErrorDocuments built with flyteidl, written with fsspec.

No tests here; the module name follows the reader tests' naming so it stays in the reader's share.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import struct
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from flyteidl.core import errors_pb2, execution_pb2
from google.protobuf import timestamp_pb2

from backend_reader.filesystems import filesystem_class
from backend_reader.storage import Storage

NS = 1_000_000_000
BASE_NS = 1_790_000_000 * NS  # a fixed moment in 2026, so tests never depend on the clock


def error_document(
    message: str = "[root cause] RuntimeError: boom",
    *,
    code: str = "USER:RuntimeError",
    worker: str | None = "worker-0",
    timestamp_ns: int | None = BASE_NS,
    recoverable: bool = False,
    origin: int = execution_pb2.ExecutionError.USER,
) -> bytes:
    """Serialized ErrorDocument; ``worker=None``/``timestamp_ns=None`` leave the field unset, as an
    older flytekit entrypoint does."""
    error = errors_pb2.ContainerError(
        code=code,
        message=message,
        kind=errors_pb2.ContainerError.RECOVERABLE if recoverable else errors_pb2.ContainerError.NON_RECOVERABLE,
        origin=origin,
    )
    if worker is not None:
        error.worker = worker
    if timestamp_ns is not None:
        seconds, nanos = divmod(timestamp_ns, NS)
        error.timestamp.CopyFrom(timestamp_pb2.Timestamp(seconds=seconds, nanos=nanos))
    return errors_pb2.ErrorDocument(error=error).SerializeToString()


def per_worker_name_pattern(worker: str = r"[A-Za-z0-9_.-]+") -> re.Pattern[str]:
    """The plugin's per-worker file name, ``error-<worker>-<uuid hex>.rc1<role><time>.pb``, with
    groups ``worker``, ``token``, ``role`` (c/v) and ``time`` (ns or n)."""
    return re.compile(
        rf"^error-(?P<worker>{worker})-(?P<token>[0-9a-f]{{32}})\.rc1(?P<role>[cv])(?P<time>-?[0-9]+|n)\.pb$"
    )


def worker_file_name(worker: str) -> str:
    """``error-<worker>-<uuid hex>.pb``: a per-worker name without a listing key (as older writers named it),
    so the reader must download the file to learn its role and time."""
    return f"error-{worker}-{uuid.uuid4().hex}.pb"


def write_files(
    protocol: str, storage_options: dict[str, Any], files: Iterable[tuple[str, bytes]], concurrency: int = 8
) -> None:
    """Write many (url, bytes) concurrently: async fsspec for object stores, plain writes locally."""
    files = list(files)
    fs_class = filesystem_class(protocol)
    if not fs_class.async_impl:
        fs = fs_class(**storage_options)
        for url, data in files:
            fs.makedirs(url.rsplit("/", 1)[0], exist_ok=True)
            fs.pipe_file(url, data)
        return

    async def run() -> None:
        fs = fs_class(asynchronous=True, skip_instance_cache=True, **storage_options)
        opener = getattr(fs, "set_session", None) or fs._set_session
        session = await opener()
        semaphore = asyncio.Semaphore(concurrency)

        async def put(url: str, data: bytes) -> None:
            async with semaphore:
                await fs._pipe_file(url, data)

        try:
            await asyncio.gather(*(put(url, data) for url, data in files))
        finally:
            await session.close()

    asyncio.run(run())


@contextlib.contextmanager
def counting_downloads() -> Iterator[list[str]]:
    """Record the store path of every download the reader makes (``Storage.read``) inside the block;
    used by the reader tests and the benchmark to show what the listing keys save."""
    paths: list[str] = []
    original = Storage.read

    async def counted(storage: Storage, path: str) -> bytes:
        paths.append(path)
        return await original(storage, path)

    Storage.read = counted  # type: ignore[method-assign]
    try:
        yield paths
    finally:
        Storage.read = original  # type: ignore[method-assign]


#: The first line of an HTTP/1.x request: method, target, version.
_REQUEST_LINE = re.compile(rb"^([A-Z]+) (\S+) HTTP/1\.[01]$")


class LoopbackProxy:
    """A TCP proxy on 127.0.0.1 in front of a loopback server, run in its own thread and loop.

    It puts real network faults between a client library and a real store, where the client's
    own code (retries, error translation) meets them exactly as in production:

    - ``delay_s`` is added before every chunk the client sends (one HTTP request is one chunk, so
      every request pays it, like a store tens of ms away);
    - ``reset_first`` connections are reset (RST) right after they are accepted, like a flaky network;
    - ``requests`` records the request line (``"GET /path?query HTTP/1.1"``) of every request that
      reached the proxy, in order, so a test counts what a reader asked the store for;
    - ``on_request(request_line)``, when given, runs in a worker thread *before* that request goes
      on to the store, while the client waits for its answer: it may change the real store at that
      moment (write or delete an object), and it may return a complete HTTP response (see
      :func:`http_response`), which the client gets instead of the store's (its head alone for a
      HEAD); that connection then closes.

    The request line is read from the start of a chunk: clients on loopback send a request's head
    in one write, so this holds for the stores' client libraries used here (gcsfs, s3fs).
    """

    def __init__(
        self,
        upstream_port: int,
        *,
        delay_s: float = 0.0,
        reset_first: int = 0,
        on_request: Callable[[str], bytes | None] | None = None,
    ) -> None:
        self.upstream_port = upstream_port
        self.delay_s = delay_s
        self.reset_first = reset_first
        self.on_request = on_request
        self.connections = 0
        self.resets = 0
        self.requests: list[str] = []
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> LoopbackProxy:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("proxy did not start")
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(10)

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            await self._stop.wait()

    async def _handle(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        if self.resets < self.reset_first:
            self.resets += 1
            sock = client_writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client_writer.transport.abort()
            return
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            client_writer.transport.abort()
            return
        await asyncio.gather(
            self._forward_requests(client_reader, client_writer, upstream_writer),
            self._pump(upstream_reader, client_writer),
        )

    async def _forward_requests(
        self,
        client_reader: asyncio.StreamReader,
        client_writer: asyncio.StreamWriter,
        upstream_writer: asyncio.StreamWriter,
    ) -> None:
        """Client to store: record each request line, let ``on_request`` act or answer, delay, send on."""
        try:
            while data := await client_reader.read(65536):
                match = _REQUEST_LINE.match(data.split(b"\r\n", 1)[0])
                if match is not None:
                    line = match.group(0).decode("latin-1")
                    self.requests.append(line)
                    if self.on_request is not None:
                        answer = await asyncio.to_thread(self.on_request, line)
                        if answer is not None:
                            if match.group(1) == b"HEAD":  # a HEAD's answer is its head alone (RFC 9110)
                                answer = answer.split(b"\r\n\r\n", 1)[0] + b"\r\n\r\n"
                            client_writer.write(answer)
                            await client_writer.drain()
                            break  # answered here; closing upstream ends the other direction too
                if self.delay_s:
                    await asyncio.sleep(self.delay_s)
                upstream_writer.write(data)
                await upstream_writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            upstream_writer.close()

    @staticmethod
    async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()


def http_response(status: int, reason: str, body: bytes, content_type: str) -> bytes:
    """A complete HTTP/1.1 response that closes its connection, for ``LoopbackProxy.on_request``."""
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


def access_denied_response(protocol: str) -> bytes:
    """What GCS (JSON API) or S3 answer a caller without read permission: HTTP 403 with the
    store's own error body, so the client library raises what it raises against the real store."""
    if protocol in ("gs", "gcs"):
        error = {"code": 403, "message": "caller does not have storage.objects.get access", "errors": []}
        return http_response(403, "Forbidden", json.dumps({"error": error}).encode(), "application/json")
    if protocol in ("s3", "s3a"):
        body = (
            b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code>'
            b"<Message>Access Denied</Message><RequestId>0</RequestId></Error>"
        )
        return http_response(403, "Forbidden", body, "application/xml")
    raise ValueError(f"no access-denied response for {protocol!r}")


def is_listing_request(request_line: str) -> bool:
    """True for an object listing: GCS ``GET /storage/v1/b/<bucket>/o?...``, S3 ``GET /<bucket>?list-type=2...``."""
    method, target, _ = request_line.split(" ", 2)
    path, _, query = target.partition("?")
    if method != "GET":
        return False
    return path.rstrip("/").endswith("/o") or "list-type=2" in query.split("&")


def store_port(storage_options: dict[str, Any]) -> int:
    """The loopback port of a store's endpoint (fake-gcs-server or moto)."""
    return int(storage_options["endpoint_url"].rsplit(":", 1)[1])
