"""Whether a process hosts the rendezvous store (``rootcause_engine/agent/rendezvous_host.py``): the endpoint's
port, the listening sockets ``/proc`` shows for it, and whose they are; with real sockets on loopback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rootcause_engine.agent.rendezvous_host import (
    agent_hosts_store,
    endpoint_port,
    listening_inodes,
    process_hosts_store,
    process_listens_on,
    this_agent_hosts_store,
)


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A socket of this process listening on a free loopback port, as the store's host holds one."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock


def _port(sock: socket.socket) -> int:
    return int(sock.getsockname()[1])


@pytest.mark.parametrize(
    ("endpoint", "port"),
    [("train-worker-0:29500", 29500), ("10.0.0.7:1", 1), ("[::1]:29400", 29400), ("a:b:23456", 23456),
     (None, None), ("", None), ("train-worker-0", None), ("train-worker-0:", None), ("host:http", None)],
)
def test_the_port_is_read_from_the_endpoint_s_last_colon(endpoint: str | None, port: int | None) -> None:
    assert endpoint_port(endpoint) == port


def test_a_listening_socket_is_found_by_its_port_and_inode(listener: socket.socket) -> None:
    inode = os.fstat(listener.fileno()).st_ino
    assert inode in listening_inodes(_port(listener))
    assert process_listens_on(os.getpid(), _port(listener))


def test_a_bound_socket_that_does_not_listen_is_no_store() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        assert listening_inodes(_port(sock)) == set()
        assert not process_listens_on(os.getpid(), _port(sock))


def test_another_process_or_a_gone_one_does_not_hold_this_process_s_socket(listener: socket.socket) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert not process_listens_on(child.pid, _port(listener))
    finally:
        child.kill()
        child.wait()
    assert not process_listens_on(child.pid, _port(listener))  # reaped: no /proc/<pid>/fd at all


def test_both_tables_are_read_from_the_proc_given_and_a_missing_one_is_skipped(tmp_path: Path) -> None:
    header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    (tmp_path / "net").mkdir()
    (tmp_path / "net" / "tcp").write_text(
        header
        + "   0: 0100007F:7530 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 111 1\n"
        + "   1: 0100007F:7530 0100007F:9C40 01 00000000:00000000 00:00000000 00000000  1000        0 222 1\n"
        + "   2: 00000000:7531 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 333 1\n"
        + "   3: short line\n"
    )
    assert listening_inodes(30000, tmp_path) == {111}  # 0x7530; the established connection is no listener
    assert listening_inodes(30001, tmp_path) == {333}
    assert listening_inodes(30002, tmp_path) == set()
    (tmp_path / "net" / "tcp6").write_text(
        header + "   0: 00000000000000000000000001000000:7532 00000000000000000000000000000000:0000 0A "
                 "00000000:00000000 00:00000000 00000000  1000        0 444 1\n"
    )
    assert listening_inodes(30002, tmp_path) == {444}  # an IPv6 listener counts too
    (tmp_path / "42" / "fd").mkdir(parents=True)
    (tmp_path / "42" / "fd" / "3").symlink_to("socket:[111]")
    (tmp_path / "42" / "fd" / "4").symlink_to("/dev/null")
    (tmp_path / "42" / "fd" / "5").symlink_to("socket:[333]")
    assert process_listens_on(42, 30000, tmp_path) and process_listens_on(42, 30001, tmp_path)
    assert not process_listens_on(43, 30000, tmp_path)
    assert listening_inodes(30000, tmp_path / "missing") == set()


def test_without_an_endpoint_nobody_is_said_to_host_the_store(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PET_RDZV_ENDPOINT", raising=False)
    assert process_hosts_store(os.getpid()) is None and agent_hosts_store() is None
    assert this_agent_hosts_store() is False


def test_the_agent_that_listens_on_the_endpoint_s_port_hosts_the_store(
    monkeypatch: pytest.MonkeyPatch, listener: socket.socket
) -> None:
    monkeypatch.setenv("PET_RDZV_ENDPOINT", f"localhost:{_port(listener)}")
    assert process_hosts_store(os.getpid()) is True and this_agent_hosts_store() is True
    monkeypatch.setenv("PET_RDZV_ENDPOINT", f"localhost:{_port(listener) + 1 if _port(listener) < 65535 else 1}")
    assert this_agent_hosts_store() is False


def test_a_worker_asks_about_its_parent_agent(listener: socket.socket) -> None:
    """A real child process (the worker) asks about this process (its agent), which holds the listener."""
    code = "from rootcause_engine.agent.rendezvous_host import agent_hosts_store as a; print(a())"
    env = {**os.environ, "PET_RDZV_ENDPOINT": f"127.0.0.1:{_port(listener)}"}
    answer = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60,
                            check=True)
    assert answer.stdout == "True\n"
    env["PET_RDZV_ENDPOINT"] = "127.0.0.1:1"
    answer = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60,
                            check=True)
    assert answer.stdout == "False\n"
