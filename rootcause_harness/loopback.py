"""Loopback helpers shared by the simulators, the tests' object-store fixtures and the benchmarks.

Stdlib only, so importing it costs nothing (no flytekit, no torch): the tests' store fixtures use
it too.
"""

from __future__ import annotations

import socket
from collections.abc import MutableMapping

#: glibc resolver options for processes that talk over loopback only: each DNS query waits 1 s, once.
#: torch 2.13's c10d sockets name every peer with ``getnameinfo`` without ``NI_NUMERICHOST``; a
#: TCPStore or gloo peer on 127.0.0.1 is ``::ffff:127.0.0.1`` (a dual-stack socket), which
#: ``/etc/hosts`` does not list, so each connection asks the machine's DNS server for a PTR record.
#: Where that server drops queries (measured on this project's sandbox: 14-16% of lookups with 8 at
#: once), glibc's defaults (5 s, 2 attempts) stall the connection 5-10 s per lookup, and the
#: TCPStore server does it on its only loop thread, stalling every client of the store.
LOOPBACK_RESOLVER_OPTIONS = "timeout:1 attempts:1"
RESOLVER_OPTIONS_VARIABLE = "RES_OPTIONS"


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now (for a rendezvous or a local server)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def bound_dns_waits(env: MutableMapping[str, str]) -> MutableMapping[str, str]:
    """Give ``env`` :data:`LOOPBACK_RESOLVER_OPTIONS` unless it sets resolver options of its own.

    For environments of processes whose every peer is on loopback (simulated pods, test launches),
    where a reverse lookup can only fail: it then costs at most 1 s instead of 10.
    """
    env.setdefault(RESOLVER_OPTIONS_VARIABLE, LOOPBACK_RESOLVER_OPTIONS)
    return env
