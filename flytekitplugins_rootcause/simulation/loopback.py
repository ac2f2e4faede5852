"""Loopback helpers shared by the simulators, the tests' object-store fixtures and the benchmarks.

Stdlib only, so importing it costs nothing (no flytekit, no torch): the tests' store fixtures use
it too.
"""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now (for a rendezvous or a local server)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
