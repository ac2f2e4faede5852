"""``rootcause_harness/netns.py`` without making a namespace: why pods cannot get one, a network's names
and addresses, a pod's command line, the hosts files, the API endpoint's listener, and clean-up."""

from __future__ import annotations

import ipaddress
import re
import socket
import threading
from pathlib import Path

import pytest

from rootcause_harness import netns
from rootcause_harness.netns import PodHost, PodNetwork


def _with_pods(network: PodNetwork, *names: str) -> PodNetwork:
    """The pods ``add_pod`` would record (their namespaces not made)."""
    for index, name in enumerate(names):
        network.pods[name] = PodHost(name, f"ns{index}", f"{network.gateway[:-2]}.{10 + index}", f"veth{index}")
    return network


def test_namespaces_need_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    assert netns.available() == "network namespaces need root"


def test_namespaces_need_the_ip_tc_and_unshare_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netns.os, "geteuid", lambda: 0)
    monkeypatch.setenv("PATH", "")
    assert netns.available() == "network namespaces need the ip, tc and unshare commands"


def test_a_network_has_its_own_bridge_and_private_24() -> None:
    first, second = PodNetwork(), PodNetwork()
    for network in (first, second):
        assert re.fullmatch(r"rcb[0-9a-f]{6}", network.bridge)
        assert len(network.bridge) <= 15  # a Linux interface name's limit
        gateway = ipaddress.ip_address(network.gateway)
        assert gateway.is_private and network.gateway.endswith(".1")
        assert 20 <= int(network.gateway.split(".")[1]) < 220
        assert network.pods == {}
    assert first.bridge != second.bridge


def test_a_pods_command_runs_in_its_namespace_under_its_host_name() -> None:
    network = _with_pods(PodNetwork(), "train-worker-0", "train-worker-1")
    assert network.command("train-worker-1", ["python", "-m", "x"]) == [
        "ip", "netns", "exec", "ns1", "unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"',
        "train-worker-1", "python", "-m", "x",
    ]
    with pytest.raises(KeyError):
        network.command("train-worker-9", ["true"])


def test_every_pod_resolves_every_pods_host_name(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(netns, "NETNS_ETC", tmp_path)
    network = _with_pods(PodNetwork(), "a", "b")
    network._write_hosts()
    prefix = network.gateway[:-2]
    expected = f"127.0.0.1 localhost\n{prefix}.10 a\n{prefix}.11 b\n"
    assert (tmp_path / "ns0" / "hosts").read_text() == expected
    assert (tmp_path / "ns1" / "hosts").read_text() == expected


def test_closing_removes_the_pods_files_even_when_their_links_are_already_gone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(netns, "NETNS_ETC", tmp_path)
    network = _with_pods(PodNetwork(), "a", "b")
    network._write_hosts()
    calls: list[tuple[str, ...]] = []

    def run(*args: str) -> None:
        calls.append(args)
        raise netns.subprocess.CalledProcessError(1, args)

    monkeypatch.setattr(netns, "_run", run)
    network.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    assert calls == [("ip", "netns", "del", "ns0"), ("ip", "link", "del", "veth0"),
                     ("ip", "netns", "del", "ns1"), ("ip", "link", "del", "veth1"),
                     ("ip", "link", "del", network.bridge)]


def test_the_api_endpoint_needs_an_entered_network() -> None:
    with pytest.raises(AssertionError, match="not entered"):
        PodNetwork().api_env()


def test_the_api_endpoint_accepts_and_closes_each_connection_and_stops_with_its_listener() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    thread = threading.Thread(target=netns._accept_and_close, args=(listener,), daemon=True)
    thread.start()
    for _ in range(2):
        with socket.create_connection(listener.getsockname(), timeout=10) as conn:
            conn.settimeout(10)
            assert conn.recv(1) == b""  # accepted, then closed by the endpoint
    network = PodNetwork()
    network._api = listener
    _, port = listener.getsockname()
    assert network.api_env() == {"KUBERNETES_SERVICE_HOST": network.gateway, "KUBERNETES_SERVICE_PORT": str(port)}
    listener.shutdown(socket.SHUT_RDWR)
    listener.close()
    thread.join(timeout=10)
    assert not thread.is_alive()
