"""Agent side: a TCP connection to the watched peer pod, whose closing says at once that its agent may be gone.

Why: the heartbeat alone can only say "silent for ``lost_after_s``" (5 s by default). Most lost pods
are not silent, though. A deleted, evicted or killed pod has its sockets closed by its kernel, and
the other end reads the close within a round trip. So the watcher holds a connection to its peer's
agent. A closing is evidence, not a verdict: a proxy may close a link whose ends live on. The peer
watch confirms it by the heartbeat and a fresh probe. How, with the hub: ``docs/frozen_pods.md``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import ipaddress
import logging
import os
import queue
import secrets
import selectors
import socket
import time
from collections.abc import Callable

from rootcause_engine.agent.store_values import decimal
from rootcause_engine.thread_guard import GuardedLoop, LoopGuard

logger = logging.getLogger(__name__)

#: The greeting a listener sends on each accepted connection: the protocol's name and the token
#: the listener published, so that a connection to a port some other process reused is not
#: taken for a link to the peer.
_GREETING_PREFIX = b"rootcause-link/1 "
_GREETING_MAX = 128
#: How long a link may take to connect and be greeted before it is given up (the peer is then
#: watched by heartbeat alone).
CONNECT_TIMEOUT_S = 5.0
#: How often the hub's loop wakes to give up links that did not connect in time.
_TICK_S = 0.5
#: Idle seconds before the watcher's end sends a TCP keepalive (then every ``KEEPALIVE_INTERVAL_S``,
#: ``KEEPALIVE_PROBES`` times before the kernel gives the connection up): well under the idle
#: timeouts of NAT gateways and proxies (minutes), rare enough to cost nothing.
KEEPALIVE_IDLE_S = 60
KEEPALIVE_INTERVAL_S = 15
KEEPALIVE_PROBES = 4


@dataclasses.dataclass(frozen=True)
class LinkEndpoint:
    """Where a pod's agent listens for its watcher, and the token its greeting carries."""

    host: str
    port: int
    token: str

    def to_text(self) -> str:
        return f"{self.token} {self.port} {self.host}"

    @classmethod
    def from_text(cls, text: bytes | str | None) -> LinkEndpoint | None:
        """The endpoint a peer published; ``None`` for none or anything malformed (never trusted).

        The host is an IP address, as :meth:`LinkHub.listen` publishes it: a name would be looked
        up (a malformed one raises ``UnicodeError`` from the IDNA codec, a slow resolver stalls the
        isolation rule's probes); the port and the token are ASCII."""
        if text is None:
            return None
        try:
            token, port, host = (text.decode() if isinstance(text, bytes) else text).split(" ", 2)
        except (UnicodeDecodeError, ValueError):
            return None
        number = decimal(port, low=1, high=65535)
        if number is None or not (token.isascii() and token.isalnum() and len(token) <= 64) or not _is_ip(host):
            return None
        return cls(host, number, token)


class PeerLink:
    """This process's connection to one watched peer's listener."""

    def __init__(self, hub: LinkHub, endpoint: LinkEndpoint, on_closed: Callable[[], None]) -> None:
        self.endpoint = endpoint
        self._hub = hub
        self._on_closed = on_closed
        self._greeting = b""
        self.sock: socket.socket | None = None
        self.deadline = time.monotonic() + CONNECT_TIMEOUT_S
        self.established = False
        #: the peer's agent closed the link after its greeting: its process ended
        self.closed = False
        self.given_up = False  # never established, or released by its owner

    def release(self) -> None:
        """This pod no longer watches the peer (its successor changed, or its round ended)."""
        self._hub.release(self)

    # --- the hub's thread -----------------------------------------------------------------------

    def _readable(self) -> bool:
        """Read what arrived; ``False`` once the link is over (closed, refused, or a stranger)."""
        assert self.sock is not None
        try:
            data = self.sock.recv(_GREETING_MAX)
        except BlockingIOError:
            return True
        except OSError as error:
            data, reason = b"", str(error)
        else:
            reason = "end of stream"
        if not data:
            if self.established:
                self.closed = True
                logger.debug("peer link to %s:%d closed (%s)", self.endpoint.host, self.endpoint.port, reason)
                _call_logged(self._on_closed)
            else:
                logger.debug("peer link to %s:%d not made: %s", self.endpoint.host, self.endpoint.port, reason)
                self.given_up = True
            return False
        if self.established:
            return True  # a listener sends nothing after its greeting; ignore anything else
        self._greeting += data
        if b"\n" not in self._greeting:
            if len(self._greeting) < _GREETING_MAX:
                return True
            self.given_up = True
            return False
        if self._greeting.split(b"\n", 1)[0] != _GREETING_PREFIX + self.endpoint.token.encode():
            logger.debug("peer link to %s:%d: not the peer's listener", self.endpoint.host, self.endpoint.port)
            self.given_up = True
            return False
        self.established = True
        return True


class LinkHub:
    """The process's listeners and links, served by one thread (see the module docstring)."""

    def __init__(self) -> None:
        self._selector = selectors.DefaultSelector()
        self._waker_read, self._waker_write = socket.socketpair()
        self._waker_read.setblocking(False)
        self._selector.register(self._waker_read, selectors.EVENT_READ, None)
        #: by local address; added by any thread (``dict.setdefault``: the first listener bound wins)
        self._listeners: dict[str, tuple[socket.socket, LinkEndpoint]] = {}
        self._accepted: set[socket.socket] = set()
        self._links: set[PeerLink] = set()
        #: selector changes asked for by any thread, made on the hub's thread (no lock: a queue)
        self._pending: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        #: the loop's iterations: one that raises costs itself only (:mod:`rootcause_engine.thread_guard`)
        self.guard = LoopGuard("peer link hub", stopped="its links and its listener were served no more")
        self._loop = GuardedLoop("rootcause-peer-links", self._turn_step, interval_s=_TICK_S, first_wait=False,
                                 guard=self.guard)

    def start(self) -> LinkHub:
        """Start the hub's thread (:func:`link_hub` does, once per process)."""
        self._loop.start()
        return self

    # --- called from any thread -----------------------------------------------------------------

    def listen(self, toward: tuple[str, int]) -> LinkEndpoint | None:
        """This process's endpoint on the address it reaches ``toward`` (host, port) from; ``None``
        when no such address can be found or bound (the pod is then watched by heartbeat alone)."""
        host = _local_address(toward)
        if host is None:
            return None
        known = self._listeners.get(host)
        if known is not None:
            return known[1]
        try:
            listener = socket.create_server((host, 0), family=_family(host), backlog=128)
        except OSError as error:
            logger.debug("no peer link listener on %s: %s", host, error)
            return None
        listener.setblocking(False)
        endpoint = LinkEndpoint(host, listener.getsockname()[1], secrets.token_hex(8))
        known = self._listeners.setdefault(host, (listener, endpoint))
        if known[0] is not listener:  # another thread bound one for this address meanwhile: that one serves
            listener.close()
            return known[1]
        self._on_loop(lambda: self._selector.register(listener, selectors.EVENT_READ, endpoint))
        return endpoint

    def watch(self, endpoint: LinkEndpoint, on_closed: Callable[[], None]) -> PeerLink:
        """Connect to ``endpoint``; ``on_closed`` is called (on the hub's thread) if the peer's end
        closes after its greeting."""
        link = PeerLink(self, endpoint, on_closed)

        def start() -> None:
            try:
                sock = socket.socket(_family(endpoint.host), socket.SOCK_STREAM)
            except OSError as error:
                logger.debug("peer link to %s:%d not made: %s", endpoint.host, endpoint.port, error)
                link.given_up = True
                return
            sock.setblocking(False)
            _keep_alive(sock)
            link.sock = sock
            error = sock.connect_ex((endpoint.host, endpoint.port))
            if error not in (0, errno.EINPROGRESS):
                logger.debug("peer link to %s:%d not made: %s", endpoint.host, endpoint.port, os.strerror(error))
                link.given_up = True
                sock.close()
                return
            self._links.add(link)
            self._selector.register(sock, selectors.EVENT_READ, link)

        self._on_loop(start)
        return link

    def release(self, link: PeerLink) -> None:
        """Close ``link`` without a verdict (its owner no longer watches that peer)."""

        def drop() -> None:
            link.given_up = True
            self._drop_link(link)

        self._on_loop(drop)

    # --- the hub's thread -----------------------------------------------------------------------

    def _on_loop(self, change: Callable[[], None]) -> None:
        self._pending.put(change)
        with contextlib.suppress(OSError):
            self._waker_write.send(b"\0")

    def note(self) -> str | None:
        """For the report: the hub's loop failed, or its thread died; ``None`` when neither."""
        return self.guard.note()

    def _turn_step(self) -> float:
        """The hub thread's step: one :meth:`_turn` (which waits in ``select``), the next at once; one
        that raised (logged by the guard) is followed by a pause of ``_TICK_S``, so that an error that
        repeats is no spin."""
        if not self._turn():  # the selector was closed under us (a forked child's copy): nothing to serve
            self._loop.stop(0)
        return 0.0

    def _turn(self) -> bool:
        """One round of the loop: what is ready, the pending changes, the links out of time.
        ``False`` when the selector is closed."""
        try:
            ready = self._selector.select(_TICK_S)
        except OSError:
            return False
        for key, _ in ready:
            if not self.guard.run(lambda key=key: self._serve(key.data, key.fileobj)):
                self._forget(key.data, key.fileobj)
        while True:
            try:
                change = self._pending.get_nowait()
            except queue.Empty:
                break
            _call_logged(change)
        now = time.monotonic()
        for link in [link for link in self._links if not link.established and now > link.deadline]:
            logger.debug("peer link to %s:%d not made within %g s", link.endpoint.host, link.endpoint.port,
                         CONNECT_TIMEOUT_S)
            link.given_up = True
            self._drop_link(link)
        return True

    def _serve(self, data: object, fileobj: object) -> bool:
        """Serve one ready file; ``True`` (``None``: it raised, see :meth:`_forget`)."""
        if data is None:  # the waker: pending changes are applied after this round
            with contextlib.suppress(OSError):
                while self._waker_read.recv(4096):
                    pass
        elif isinstance(data, PeerLink):
            if not data._readable():
                self._drop_link(data)
        elif isinstance(data, LinkEndpoint):  # a listener: a watcher connects
            self._accept(fileobj, data)  # type: ignore[arg-type]
        else:  # a watcher's connection to this process: only its end matters
            self._drain_accepted(fileobj)  # type: ignore[arg-type]
        return True

    def _forget(self, data: object, fileobj: object) -> None:
        """A link or a watcher's connection whose serving raised is let go (it would be ready again
        at once, and raise again: a spinning loop); a listener and the waker are kept."""
        if isinstance(data, PeerLink):
            data.given_up = True  # no verdict: nothing was learned of the peer
            self._drop_link(data)
        elif data == "accepted":
            self._accepted.discard(fileobj)  # type: ignore[arg-type]
            with contextlib.suppress(KeyError, ValueError, OSError):
                self._selector.unregister(fileobj)  # type: ignore[arg-type]
                fileobj.close()  # type: ignore[attr-defined]

    def _accept(self, listener: socket.socket, endpoint: LinkEndpoint) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as error:  # out of file descriptors, for one: the watcher gives up in time
                logger.debug("peer link listener: %s", error)
                return
            conn.setblocking(False)
            try:
                conn.send(_GREETING_PREFIX + endpoint.token.encode() + b"\n")
            except OSError:
                conn.close()
                continue
            self._accepted.add(conn)
            self._selector.register(conn, selectors.EVENT_READ, "accepted")

    def _drain_accepted(self, conn: socket.socket) -> None:
        try:
            if conn.recv(4096):
                return
        except BlockingIOError:
            return
        except OSError:
            pass
        self._accepted.discard(conn)
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._selector.unregister(conn)
        conn.close()

    def _drop_link(self, link: PeerLink) -> None:
        self._links.discard(link)
        if link.sock is not None:
            with contextlib.suppress(KeyError, ValueError, OSError):
                self._selector.unregister(link.sock)
            link.sock.close()

    def _close(self) -> None:
        """Close a hub never started (another thread's won the race to be the process's)."""
        for sock in (self._waker_read, self._waker_write):
            sock.close()
        self._selector.close()

    def _forget_in_child(self) -> None:
        """In a forked child: close this process's copies of the hub's descriptors (never shutting
        a connection down: the parent's copies keep every link open) and serve nothing."""
        files = [self._waker_read, self._waker_write, *(sock for sock, _ in self._listeners.values()),
                 *self._accepted, *(link.sock for link in self._links if link.sock is not None)]
        for sock in files:
            with contextlib.suppress(OSError):
                sock.close()
        with contextlib.suppress(OSError):
            self._selector.close()


#: The process's hub (one entry at most). No lock: two threads that make one at once both try
#: ``dict.setdefault``, one wins, and the other closes its own before it was started.
_hubs: dict[str, LinkHub] = {}


def link_hub() -> LinkHub:
    """The process's hub, started at the first use."""
    hub = _hubs.get("hub")
    if hub is None:
        fresh = LinkHub()
        hub = _hubs.setdefault("hub", fresh)
        if hub is fresh:
            hub.start()
        else:
            fresh._close()
    return hub


def hub_note() -> str | None:
    """For the report: what went wrong with the process's hub (:meth:`LinkHub.note`), if it runs."""
    hub = _hubs.get("hub")
    return None if hub is None else hub.note()


def _forget_hub_in_child() -> None:
    hub = _hubs.pop("hub", None)
    if hub is not None:
        hub._forget_in_child()


os.register_at_fork(after_in_child=_forget_hub_in_child)


def _local_address(toward: tuple[str, int]) -> str | None:
    """The address this host reaches ``toward`` from (a datagram socket's route choice: nothing is sent)."""
    try:
        family, _, _, _, address = socket.getaddrinfo(toward[0], toward[1], type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect(address)
            return str(probe.getsockname()[0])
    except (OSError, IndexError, UnicodeError) as error:
        logger.debug("no local address toward %s:%s: %s", toward[0], toward[1], error)
        return None


def _keep_alive(sock: socket.socket) -> None:
    """TCP keepalives on ``sock`` where the platform offers them (Linux has every option)."""
    options = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
    for name, value in (("TCP_KEEPIDLE", KEEPALIVE_IDLE_S), ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL_S),
                        ("TCP_KEEPCNT", KEEPALIVE_PROBES)):
        if hasattr(socket, name):
            options.append((socket.IPPROTO_TCP, getattr(socket, name), value))
    for level, option, value in options:
        with contextlib.suppress(OSError):
            sock.setsockopt(level, option, value)


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _is_ip(host: str) -> bool:
    """Whether ``host`` is an IPv4 or IPv6 address (an IPv6 one may carry its scope, ``%eth0``)."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _call_logged(callback: Callable[[], None]) -> None:
    try:
        callback()
    except Exception:  # the hub's thread serves every link of the process: it must go on
        logger.exception("peer link callback failed")


#: How long a reachability probe waits for a peer's greeting: a live peer on a working network
#: answers within a round trip; a cut-off one (no SYN-ACK ever) is given up on then.
PROBE_TIMEOUT_S = 1.5


def probe(endpoint: LinkEndpoint, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """One fresh connection to ``endpoint``: does the peer's listener greet within ``timeout_s``?

    The isolation rule's witness (:mod:`rootcause_core.liveness`): unlike the store, which lives in
    one pod, each probe goes straight to one peer, so a pod cut off from the network reaches none
    of them, and a pod on the healthy side reaches the live ones. The connection is closed at once
    (the listener takes it for a watcher that left)."""
    expected = _GREETING_PREFIX + endpoint.token.encode()
    try:
        with socket.create_connection((endpoint.host, endpoint.port), timeout=timeout_s) as sock:
            sock.settimeout(timeout_s)
            greeting = b""
            while b"\n" not in greeting and len(greeting) < _GREETING_MAX:
                data = sock.recv(_GREETING_MAX)
                if not data:
                    return False
                greeting += data
    except (OSError, ValueError):  # ValueError: a host no socket takes (UnicodeError is one)
        return False
    return greeting.split(b"\n", 1)[0] == expected


def answers(endpoint: LinkEndpoint, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """Whether the agent behind ``endpoint`` is still there, by one fresh connection: the peer watch's
    question before a closed link and a paused heartbeat condemn a pod.

    ``True`` when its listener greets, or accepts the connection and has not greeted within
    ``timeout_s`` (the kernel accepts for a process that exists: one paused whole, by its host or a
    long stall, greets once it runs again); ``False`` when the connection is refused or reset (the
    process that listened is gone: its kernel closed the port at once), is not made within
    ``timeout_s`` (the pod's address is gone, or its node), or is greeted by another process (a
    reused port)."""
    expected = _GREETING_PREFIX + endpoint.token.encode()
    try:
        sock = socket.create_connection((endpoint.host, endpoint.port), timeout=timeout_s)
    except (OSError, ValueError):  # refused, unreachable, not made in time, a host no socket takes
        return False
    with sock:
        greeting = b""
        try:
            sock.settimeout(timeout_s)
            while b"\n" not in greeting and len(greeting) < _GREETING_MAX:
                data = sock.recv(_GREETING_MAX)
                if not data:
                    return False
                greeting += data
        except TimeoutError:
            return True  # accepted by its kernel, not yet greeted: the process exists, paused
        except OSError:
            return False
    return greeting.split(b"\n", 1)[0] == expected
