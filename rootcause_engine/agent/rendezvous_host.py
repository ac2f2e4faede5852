"""Does this pod's agent host the job's rendezvous store?

With the c10d rendezvous backend, one agent (the pod matching ``PET_RDZV_ENDPOINT``, worker 0 in
a PyTorchJob) runs the TCPStore every agent rendezvouses through. If that pod left the job, the
others could not re-rendezvous: the store would leave with it. So the straggler check's ``exclude``
must never drop that pod, and when that pod is lost its peers can no longer reach the store at all
(``peer_watch.py`` names it then). An agent, or a worker about its parent agent, finds out by asking
Linux whether the agent process holds a listening socket on the endpoint's port; /proc is shared
within a pod, and the answer is exact even when every agent runs on one host, as in tests.
"""

from __future__ import annotations

import os
from pathlib import Path

_LISTEN = "0A"  # TCP state LISTEN in /proc/net/tcp{,6}


def endpoint_port(endpoint: str | None) -> int | None:
    """The port of ``host:port`` (``PET_RDZV_ENDPOINT``); None if absent or unparsable."""
    if not endpoint or ":" not in endpoint:
        return None
    try:
        return int(endpoint.rsplit(":", 1)[1])
    except ValueError:
        return None


def listening_inodes(port: int, proc: Path = Path("/proc")) -> set[int]:
    """Inodes of the sockets listening on ``port`` (IPv4 and IPv6) in this network namespace."""
    inodes = set()
    for table in ("net/tcp", "net/tcp6"):
        try:
            lines = (proc / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == _LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(int(fields[9]))
    return inodes


def process_listens_on(pid: int, port: int, proc: Path = Path("/proc")) -> bool:
    """Whether process ``pid`` holds one of the sockets listening on ``port``."""
    inodes = listening_inodes(port, proc)
    if not inodes:
        return False
    fd_dir = proc / str(pid) / "fd"
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return False
    for fd in fds:
        try:
            target = os.readlink(fd_dir / fd)
        except OSError:
            continue
        if target.startswith("socket:[") and int(target[8:-1]) in inodes:
            return True
    return False


def process_hosts_store(agent_pid: int) -> bool | None:
    """True/False for the agent process ``agent_pid``; None when ``PET_RDZV_ENDPOINT`` is not set."""
    port = endpoint_port(os.environ.get("PET_RDZV_ENDPOINT"))
    if port is None:
        return None
    return process_listens_on(agent_pid, port)


def agent_hosts_store() -> bool | None:
    """For a worker: does its agent (its parent) host the store? None without ``PET_RDZV_ENDPOINT``."""
    return process_hosts_store(os.getppid())


def this_agent_hosts_store() -> bool:
    """For the agent itself: does this process host the store?"""
    return bool(process_hosts_store(os.getpid()))
