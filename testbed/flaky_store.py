"""A fault-injecting HTTP proxy in front of a loopback object store: a store that says "not now".

Why: an object store answers 429 or 503 (S3's ``SlowDown``, GCS's rate limit) exactly when every
pod of a failing job writes its error document at once, and moto and fake-gcs-server never do. The
proxy stands between the client (s3fs, through flytekit's settings or plain fsspec) and the real
server: it forwards every request as it came, except those a :class:`Fault` matches, which it
answers itself with the fault's status and an S3-style error body, as S3 does. The document the
client then writes lands in the real server, where a test reads it back.

A :class:`Fault` matches by method and a regular expression on the request path, and answers the
first ``count`` matching requests (``None``: all of them). The proxy runs on a thread of the test's
process (a stdlib threading HTTP server on a free 127.0.0.1 port), so a subprocess under test (the
patched entrypoint) reaches it like any store: ``FlakyProxy.store`` is the :class:`ObjectStore`
routed through it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import re
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from testbed.object_stores import ObjectStore

#: Request headers that belong to one hop, not to the request: never forwarded as they came.
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "upgrade"})

#: S3's error codes for the statuses a throttled or failing store answers with.
S3_ERROR_CODES = {403: "AccessDenied", 429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable"}


@dataclasses.dataclass
class Fault:
    """Answer ``status`` to the first ``count`` requests (``None``: every one) whose method is in
    ``methods`` and whose path (bucket and key, e.g. ``/bucket/run/out/error.pb``) ``path`` matches,
    after ``delay_s`` (cut short when the proxy stops)."""

    status: int
    count: int | None = None
    path: str = ""
    methods: tuple[str, ...] = ("PUT", "POST")
    code: str | None = None  # the S3 error code in the body; None: the usual one for ``status``
    delay_s: float = 0.0  # how long it keeps the client waiting first (a store that stopped answering)
    served: int = 0  # how many requests it answered so far

    def matches(self, method: str, path: str) -> bool:
        if method not in self.methods or not re.search(self.path, urllib.parse.unquote(path)):
            return False
        return self.count is None or self.served < self.count

    def body(self) -> bytes:
        code = self.code or S3_ERROR_CODES.get(self.status, "ServiceUnavailable")
        return (
            '<?xml version="1.0" encoding="UTF-8"?>'
            f"<Error><Code>{code}</Code><Message>injected by the flaky store: {self.status}</Message>"
            "<RequestId>flaky-store</RequestId></Error>"
        ).encode()


@dataclasses.dataclass(frozen=True)
class Seen:
    """One request the proxy received, and the status it answered (its own or the server's)."""

    method: str
    path: str
    status: int
    injected: bool


class FlakyProxy:
    """The running proxy: where it listens, what it does to requests, what it saw."""

    def __init__(self, upstream: str, faults: list[Fault]) -> None:
        parsed = urllib.parse.urlsplit(upstream)
        if parsed.scheme != "http" or parsed.hostname is None or parsed.port is None:
            raise ValueError(f"the flaky store forwards to a plain http://host:port server, not {upstream!r}")
        self.upstream_host, self.upstream_port = parsed.hostname, parsed.port
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._faults = list(faults)
        self.seen: list[Seen] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="flaky-store", daemon=True)

    def set_faults(self, faults: list[Fault]) -> None:
        with self._lock:
            self._faults = list(faults)

    def fault_for(self, method: str, path: str) -> Fault | None:
        """The first fault that takes this request (counted as served), or ``None``: forward it."""
        with self._lock:
            for fault in self._faults:
                if fault.matches(method, path):
                    fault.served += 1
                    return fault
        return None

    def delay(self, seconds: float) -> None:
        """Keep one request waiting, but no longer than the proxy runs."""
        self._stopping.wait(seconds)

    def record(self, seen: Seen) -> None:
        with self._lock:
            self.seen.append(seen)

    def store(self, store: ObjectStore) -> ObjectStore:
        """``store`` (an s3 one) reached through the proxy, in this process and in subprocesses."""
        if store.protocol != "s3":
            raise ValueError("the flaky store speaks S3's error format: route an s3 store through it")
        env = {**store.env, "AWS_ENDPOINT_URL": self.endpoint, "FSSPEC_S3_ENDPOINT_URL": self.endpoint}
        options = {**store.storage_options, "endpoint_url": self.endpoint}
        return dataclasses.replace(store, storage_options=options, env=env)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


def _handler_for(proxy: FlakyProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # requests may come in chunks; every answer closes its connection

        def _relay(self) -> None:
            body = self._read_body()
            fault = proxy.fault_for(self.command, self.path)
            if fault is not None:
                proxy.delay(fault.delay_s)
                self._answer(fault.status, [("Content-Type", "application/xml")], fault.body())
                proxy.record(Seen(self.command, self.path, fault.status, injected=True))
                return
            headers = {name: value for name, value in self.headers.items() if name.lower() not in _HOP_BY_HOP}
            if body or self.command in ("PUT", "POST"):
                headers["Content-Length"] = str(len(body))
            connection = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream_port, timeout=60)
            try:
                connection.request(self.command, self.path, body=body, headers=headers)
                response = connection.getresponse()
                data = response.read()
                head = self.command == "HEAD"  # its Content-Length is the object's size: relayed as it is
                dropped = _HOP_BY_HOP if head else _HOP_BY_HOP | {"content-length"}
                kept = [(name, value) for name, value in response.getheaders() if name.lower() not in dropped]
            finally:
                connection.close()
            self._answer(response.status, kept, data, head=head)
            proxy.record(Seen(self.command, self.path, response.status, injected=False))

        def _read_body(self) -> bytes:
            """The request's body, whether sent with a length or in chunks (forwarded with a length)."""
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                chunks = []
                while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(chunks)
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _answer(self, status: int, headers: list[tuple[str, str]], body: bytes, head: bool = False) -> None:
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            if not head:
                self.send_header("Content-Length", str(len(body)))
            # no connection left in a client's pool once the test ends (aiohttp warns of one at exit)
            self.send_header("Connection", "close")
            self.close_connection = True
            with contextlib.suppress(ConnectionError):  # a client that gave up waiting has left
                self.end_headers()
                if not head:
                    self.wfile.write(body)

        do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _relay

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: a test reads ``proxy.seen``, not the server's access log."""

    return Handler


@contextlib.contextmanager
def flaky_proxy(upstream: str, faults: list[Fault] | None = None) -> Iterator[FlakyProxy]:
    """A proxy to ``upstream`` (``http://127.0.0.1:<port>``) that answers as ``faults`` say."""
    proxy = FlakyProxy(upstream, faults or [])
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()
