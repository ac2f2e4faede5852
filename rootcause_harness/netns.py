"""Pods on a network of their own: one network and UTS namespace per pod, joined by a bridge, and cut
the way a failed NIC or switch port cuts a node.

Why: on one host every pod reaches every other over loopback, and a pod "cut off" there is only a
process that stopped talking. A real partition drops every packet both ways with no FIN or RST,
while the pod's processes run on and see everyone else fall silent, the object store included.
:class:`PodNetwork` gives each pod its own namespace (``ip netns``), its own host name (``unshare
--uts``, resolved in every pod through ``/etc/netns/<ns>/hosts``) and one veth into a bridge whose
address (:attr:`PodNetwork.gateway`, its MAC fixed) is where the test serves the object store. :meth:`PodNetwork.cut`
detaches the pod's veth from the bridge and gives it a queue that holds no packet (``pfifo limit
0``; the kernel here has no netem): silence, as a dead link gives. :meth:`PodNetwork.cut_links`
cuts only the links between one pod and the others (a blackhole route each way, as a network
policy or a route between two nodes does), the rest of the network still reached.

The cluster's API endpoint, which every pod's environment names (``KUBERNETES_SERVICE_HOST``), is
a listener on the gateway that accepts and closes connections (:meth:`PodNetwork.api_env`): what
a pod that still reaches the control plane reaches.

Needs root (tests skip without it). Every address is inside this machine: the bridge and the pods'
namespaces are made here and removed on exit, even when the test fails.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import shutil
import socket
import subprocess
import threading
from pathlib import Path

#: Where ``ip netns exec`` finds a namespace's own ``/etc`` files (bind-mounted over ``/etc``).
NETNS_ETC = Path("/etc/netns")
#: The pods' interface inside their namespace (what ``GLOO_SOCKET_IFNAME`` names).
POD_INTERFACE = "eth0"


def available() -> str | None:
    """Why pods cannot get namespaces here (``None`` when they can): root and ``ip`` are needed."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None or shutil.which("unshare") is None or shutil.which("tc") is None:
        return "network namespaces need the ip, tc and unshare commands"
    return None


def _run(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=30)


@dataclasses.dataclass(frozen=True)
class PodHost:
    """One pod's place on the network: its namespace, host name, address and host-side veth."""

    name: str
    namespace: str
    address: str
    host_veth: str


class PodNetwork:
    """A bridge and one namespace per pod (see the module docstring); a context manager."""

    def __init__(self) -> None:
        suffix = secrets.token_hex(3)
        self._suffix = suffix
        # a /24 of its own per network, so that tests running side by side never share addresses
        subnet = int(suffix[:2], 16) % 200 + 20, int(suffix[2:4], 16)
        self._prefix = f"10.{subnet[0]}.{subnet[1]}"
        self.bridge = f"rcb{suffix}"
        self.gateway = f"{self._prefix}.1"
        #: the bridge's own MAC, locally administered and fixed for the network's life
        self.gateway_mac = "02:72:63:" + ":".join(suffix[i:i + 2] for i in (0, 2, 4))
        self.pods: dict[str, PodHost] = {}
        self._api: socket.socket | None = None

    def __enter__(self) -> PodNetwork:
        try:
            _run("ip", "link", "add", self.bridge, "type", "bridge")
            # a bridge takes the lowest MAC of its ports unless given one: a cut pod's port leaving it
            # would change the gateway's MAC under every pod's ARP cache (a switch never does that)
            _run("ip", "link", "set", self.bridge, "address", self.gateway_mac)
            _run("ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge)
            _run("ip", "link", "set", self.bridge, "up")
            self._api = socket.create_server((self.gateway, 0))
            threading.Thread(target=_accept_and_close, args=(self._api,), name="netns-api-endpoint",
                             daemon=True).start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add_pod(self, name: str) -> PodHost:
        """A namespace for pod ``name``, on the bridge, with the next address."""
        index = len(self.pods)
        host = PodHost(name, f"rc{self._suffix}p{index}", f"{self._prefix}.{10 + index}", f"rc{self._suffix}h{index}")
        self.pods[name] = host
        inner = f"rc{self._suffix}n{index}"
        _run("ip", "netns", "add", host.namespace)
        _run("ip", "link", "add", host.host_veth, "type", "veth", "peer", "name", inner)
        _run("ip", "link", "set", inner, "netns", host.namespace)
        _run("ip", "netns", "exec", host.namespace, "ip", "link", "set", inner, "name", POD_INTERFACE)
        _run("ip", "netns", "exec", host.namespace, "ip", "addr", "add", f"{host.address}/24", "dev", POD_INTERFACE)
        _run("ip", "netns", "exec", host.namespace, "ip", "link", "set", POD_INTERFACE, "up")
        _run("ip", "netns", "exec", host.namespace, "ip", "link", "set", "lo", "up")
        _run("ip", "link", "set", host.host_veth, "master", self.bridge)
        _run("ip", "link", "set", host.host_veth, "up")
        self._write_hosts()
        return host

    def _write_hosts(self) -> None:
        """Every pod resolves every pod's host name (torch's workers reach the store host by name)."""
        lines = ["127.0.0.1 localhost", *(f"{pod.address} {pod.name}" for pod in self.pods.values())]
        for pod in self.pods.values():
            folder = NETNS_ETC / pod.namespace
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "hosts").write_text("\n".join(lines) + "\n")

    def command(self, name: str, args: list[str]) -> list[str]:
        """``args`` run as pod ``name``'s main process: in its namespace, under its own host name (each
        step execs the next, so the pid the simulator signals is the pod's own process)."""
        host = self.pods[name]
        return ["ip", "netns", "exec", host.namespace, "unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"',
                host.name, *args]

    def api_env(self) -> dict[str, str]:
        """The variables through which every pod finds the cluster's API endpoint."""
        assert self._api is not None, "the network is not entered"
        return {"KUBERNETES_SERVICE_HOST": self.gateway, "KUBERNETES_SERVICE_PORT": str(self._api.getsockname()[1])}

    def cut_links(self, name: str) -> None:
        """Pod ``name`` and every other pod lose each other, each way; the gateway (the object store,
        the API endpoint) is still reached by all."""
        host = self.pods[name]
        for other in self.pods.values():
            if other.name != name:
                _run("ip", "netns", "exec", host.namespace, "ip", "route", "add", "blackhole", f"{other.address}/32")
                _run("ip", "netns", "exec", other.namespace, "ip", "route", "add", "blackhole", f"{host.address}/32")

    def cut(self, name: str) -> None:
        """Pod ``name`` loses the network: every packet either way is dropped, nothing is closed."""
        host = self.pods[name]
        _run("ip", "link", "set", host.host_veth, "nomaster")
        _run("tc", "qdisc", "add", "dev", host.host_veth, "root", "pfifo", "limit", "0")

    def close(self) -> None:
        """Remove every namespace, link and file this network made (each on its own: one that is
        already gone does not keep the others)."""
        for pod in self.pods.values():
            for args in (("ip", "netns", "del", pod.namespace), ("ip", "link", "del", pod.host_veth)):
                with contextlib.suppress(subprocess.SubprocessError, OSError):
                    _run(*args)
            shutil.rmtree(NETNS_ETC / pod.namespace, ignore_errors=True)
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            _run("ip", "link", "del", self.bridge)
        if self._api is not None:
            self._api.close()


def _accept_and_close(listener: socket.socket) -> None:
    """The API endpoint: each connection is accepted and closed (reached is all a pod asks)."""
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:  # closed with the network
            return
        conn.close()
