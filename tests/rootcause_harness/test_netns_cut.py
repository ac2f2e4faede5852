"""A real cut in real namespaces: the cut pod reaches no one, and every other pod still reaches the
gateway (the object store's address) at once, as it would through a switch whose one port failed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rootcause_harness import netns
from rootcause_harness.netns import PodNetwork

pytestmark = pytest.mark.skipif(netns.available() is not None, reason=str(netns.available()))

#: Connects from inside a namespace; exit 0 when the peer accepted within the timeout.
_CONNECT = "import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3]))"


def _reaches(network: PodNetwork, pod: str, timeout_s: float) -> bool:
    host, port = network.api_env()["KUBERNETES_SERVICE_HOST"], network.api_env()["KUBERNETES_SERVICE_PORT"]
    command = ["ip", "netns", "exec", network.pods[pod].namespace, sys.executable, "-c", _CONNECT, host, port,
               str(timeout_s)]
    return subprocess.run(command, capture_output=True, timeout=timeout_s + 30).returncode == 0


def _mac(interface: str) -> str:
    return Path(f"/sys/class/net/{interface}/address").read_text().strip()


def test_cutting_the_pod_whose_port_has_the_lowest_mac_leaves_the_gateway_reached_by_the_others() -> None:
    """The port with the lowest MAC is the one a bridge would otherwise take its own MAC from: cutting
    it must not move the gateway's MAC from under the other pods' ARP caches."""
    with PodNetwork() as network:
        for index in range(3):
            network.add_pod(f"train-worker-{index}")
        for pod in network.pods:
            assert _reaches(network, pod, timeout_s=10), pod  # every pod's ARP cache holds the gateway
        gateway_mac = _mac(network.bridge)
        cut = min(network.pods, key=lambda pod: _mac(network.pods[pod].host_veth))
        network.cut(cut)
        assert _mac(network.bridge) == gateway_mac == network.gateway_mac
        for pod in network.pods:
            if pod != cut:
                assert _reaches(network, pod, timeout_s=3), f"{pod} lost the gateway when {cut} was cut"
        assert not _reaches(network, cut, timeout_s=2)
