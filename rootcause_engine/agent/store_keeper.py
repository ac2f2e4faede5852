"""The job's stores kept in processes of their own when the agent forks its workers.

Why: torch runs its ``TCPStore`` servers on threads of agents. Each server thread takes glibc's
resolver lock for every peer it accepts. A worker forked while that lock is held inherits it held.
Its first name lookup then waits forever, deaf to SIGTERM. Peers connect exactly when agents fork,
so under load it happens. So with ``fork``, each server runs in a *keeper* process, and the agent
talks to it as a client. The agent then holds no store thread when it forks. How:
``docs/design.md``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import logging
import os
import select
import signal
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import timedelta
from typing import Any

from rootcause_engine.agent.rendezvous_host import endpoint_port
from rootcause_engine.upstream.torch_elastic import endpoint_is_this_machine, patch_bootstrap_store_server

logger = logging.getLogger(__name__)

#: torch's default read timeout of the c10d rendezvous store (``read_timeout`` in ``rdzv_configs``).
DEFAULT_READ_TIMEOUT_S = 60
#: How long the agent waits for the keeper's server (milliseconds on an idle machine).
READY_TIMEOUT_S = 10.0
#: How often the keeper checks its parent where no pidfd can tell it the agent exited.
PARENT_POLL_S = 0.2


@dataclasses.dataclass(frozen=True)
class StoreKeeper:
    """A running keeper: its pid, and the agent's copy of the store's listening socket."""

    pid: int
    listener: socket.socket
    port: int


def keeps_rendezvous_store(
    start_method: str, rdzv_backend: str, endpoint: str | None, rdzv_configs: Mapping[str, Any] | None
) -> bool:
    """Whether this launch's rendezvous store belongs in a keeper (before trying to bind its port)."""
    if start_method != "fork" or rdzv_backend != "c10d":
        return False
    if "is_host" in (rdzv_configs or {}):  # torch would not fall back to a client then
        return False
    port = endpoint_port(endpoint)
    if not port:  # port 0: torch picks a free port of its own, which a keeper cannot know beforehand
        return False
    host = str(endpoint).rsplit(":", 1)[0].strip("[]")
    return endpoint_is_this_machine(host)


def bind_listener(port: int) -> socket.socket | None:
    """A listening socket on ``port``, on every address as torch's server binds; None if taken."""
    attempts = [(socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")] if socket.has_ipv6 else [
        (socket.AF_INET, "0.0.0.0")]
    for family, address in attempts:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((address, port))
            sock.listen(socket.SOMAXCONN)
            return sock
        except OSError as exc:
            sock.close()
            if exc.errno == errno.EADDRINUSE:
                return None  # another process of this machine hosts it: torch connects as a client
    return None


def _readable_within(fd: int, timeout_s: float | None) -> bool:
    """Whether ``fd`` becomes readable within ``timeout_s`` (None: wait for it); poll, so any fd number works."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(None if timeout_s is None else int(timeout_s * 1000)))


def _watch_parent(agent_pid: int) -> None:
    """Return once the agent process has exited."""
    try:
        pidfd = os.pidfd_open(agent_pid)
    except (AttributeError, OSError):
        pidfd = None
    if pidfd is not None and os.getppid() == agent_pid:
        _readable_within(pidfd, None)
        return
    while os.getppid() == agent_pid:
        time.sleep(PARENT_POLL_S)


def _run_keeper(listener: socket.socket, port: int, agent_pid: int, read_timeout_s: int, ready: int) -> None:
    """The keeper's life (in the forked child): serve the store until the agent exits."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import torch.distributed as dist

    store = dist.TCPStore(
        "127.0.0.1",
        port,
        is_master=True,
        master_listen_fd=listener.fileno(),
        wait_for_workers=False,
        multi_tenant=True,
        timeout=timedelta(seconds=read_timeout_s),
    )
    os.write(ready, b"1")
    os.close(ready)
    _watch_parent(agent_pid)
    del store


def start_keeper(port: int, read_timeout_s: int = DEFAULT_READ_TIMEOUT_S,
                 ready_timeout_s: float = READY_TIMEOUT_S) -> StoreKeeper | None:
    """Bind ``port`` (0: a free one) and fork the keeper serving it.

    None where another process already listens on the port, or where the keeper did not start its
    server in time (it is ended, and torch hosts the store in the agent as it always did).
    """
    listener = bind_listener(port)
    if listener is None:
        return None
    port = int(listener.getsockname()[1])
    agent_pid = os.getpid()
    ready_read, ready_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the keeper: never returns into the agent's code
        code = 0
        try:
            os.close(ready_read)
            _run_keeper(listener, port, agent_pid, read_timeout_s, ready_write)
        except BaseException as exc:
            code = 1
            with contextlib.suppress(Exception):
                os.write(2, f"rendezvous store keeper failed: {exc!r}\n".encode("utf-8", "replace"))
        os._exit(code)
    os.close(ready_write)
    keeper = StoreKeeper(pid, listener, port)
    try:
        started = _readable_within(ready_read, ready_timeout_s) and os.read(ready_read, 1) == b"1"
    finally:
        os.close(ready_read)
    if not started:
        logger.warning("the rendezvous store keeper did not start within %g s: the agent hosts the store",
                       ready_timeout_s)
        stop_keeper(keeper)
        return None
    logger.info("the rendezvous store on port %d runs in keeper process %d", port, pid)
    return keeper


def stop_keeper(keeper: StoreKeeper) -> None:
    """End the keeper (its store with it) and close the agent's copy of the socket."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(keeper.pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(keeper.pid, 0)
    keeper.listener.close()


class KeptStores:
    """The keepers of one launch: the rendezvous store's, if any, and the workers' stores' as torch asks."""

    def __init__(self, rendezvous: StoreKeeper | None, read_timeout_s: int) -> None:
        self.rendezvous = rendezvous
        self.keepers: list[StoreKeeper] = [] if rendezvous is None else [rendezvous]
        self._read_timeout_s = read_timeout_s

    def workers_store(self, torch_create: Callable[[str, int], Any], master_addr: str, master_port: int) -> Any:
        """The workers' shared store, served by a keeper; torch's own server where none starts."""
        keeper = start_keeper(master_port, self._read_timeout_s)
        if keeper is None:
            return torch_create(master_addr, master_port)
        self.keepers.append(keeper)
        import torch.distributed as dist

        return dist.TCPStore(  # the agent's handle: torch reads its port and keeps it, as it would the server
            "127.0.0.1",
            keeper.port,
            is_master=False,
            multi_tenant=True,
            wait_for_workers=False,
            timeout=timedelta(seconds=self._read_timeout_s),
        )

    def hand_over(self) -> None:
        """Leave the rendezvous store's keeper running until the agent process exits (it ends then by
        itself): the launch falls back to upstream's after it started, and a peer may already be
        connected to it. Killing it would cut that peer off its rendezvous; upstream's agent finds
        the port taken and connects to the keeper as torch does on any shared machine."""
        if self.rendezvous is not None:
            logger.info("the rendezvous store stays in keeper process %d for upstream's launch", self.rendezvous.pid)
            self.keepers.remove(self.rendezvous)
            self.rendezvous = None

    def stop(self) -> None:
        for keeper in reversed(self.keepers):
            stop_keeper(keeper)
        self.keepers.clear()


@contextlib.contextmanager
def stores_kept(start_method: str, rdzv_backend: str, endpoint: str | None,
                rdzv_configs: Mapping[str, Any] | None) -> Iterator[KeptStores | None]:
    """For the block, where the agent forks its workers, the stores torch would serve from it run in keepers.

    Enter it before the launch creates its rendezvous handler and before the launch starts threads.
    Yields None where workers are not forked (nothing changes then).
    """
    if start_method != "fork" or rdzv_backend != "c10d":
        yield None
        return
    read_timeout_s = int((rdzv_configs or {}).get("read_timeout", DEFAULT_READ_TIMEOUT_S))
    rendezvous = None
    if keeps_rendezvous_store(start_method, rdzv_backend, endpoint, rdzv_configs):
        rendezvous = start_keeper(int(endpoint_port(endpoint) or 0), read_timeout_s)
    kept = KeptStores(rendezvous, read_timeout_s)
    try:
        with patch_bootstrap_store_server(kept.workers_store):
            yield kept
    finally:
        kept.stop()
