"""Real c10d ``TCPStore`` servers and clients on loopback, the way a job's pods reach their rendezvous store.

One definition of how a test starts a store's server and connects to it. The server gets port 0, so
the kernel picks a free port as it binds: no race with another test or worker. Each client is a
connection of its own, as each pod's agent holds one. Every timeout is bounded, so a store that never
answers fails the test instead of hanging it.
"""

from __future__ import annotations

import datetime
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from torch.distributed import TCPStore

LOOPBACK = "127.0.0.1"
#: Far longer than any store call on an idle loopback takes, far shorter than a test's own timeout.
TIMEOUT_S = 10.0

_SERVER_PROCESS = (
    "import sys, time, datetime, torch.distributed as d\n"
    "s = d.TCPStore('127.0.0.1', 0, is_master=True, timeout=datetime.timedelta(seconds=float(sys.argv[1])), "
    "wait_for_workers=False)\n"
    "print(s.port, flush=True)\n"
    "time.sleep(600)\n"
)


def master_store(timeout_s: float = TIMEOUT_S) -> TCPStore:
    """A store server on a free loopback port, as the rendezvous store's host pod runs it.

    It serves until its last reference goes: dropping it (``del`` and ``gc.collect()``) closes every
    client's connection, which is how a test loses the store's host.
    """
    return TCPStore(LOOPBACK, 0, is_master=True, timeout=datetime.timedelta(seconds=timeout_s),
                    wait_for_workers=False)


def client(port: int, timeout_s: float = TIMEOUT_S) -> TCPStore:
    """A new client connection to the store server on ``port``."""
    return TCPStore(LOOPBACK, port, is_master=False, timeout=datetime.timedelta(seconds=timeout_s),
                    wait_for_workers=False)


@contextmanager
def store_in_process(timeout_s: float = 30.0) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """A store server in its own process, and its port. It is resumed and killed on exit.

    This is for tests that freeze the store's host (SIGSTOP) the way a node freezes. A server on a
    thread of the test's own process would freeze together with the test.
    """
    process = subprocess.Popen([sys.executable, "-c", _SERVER_PROCESS, str(timeout_s)], stdout=subprocess.PIPE,
                               text=True)
    try:
        assert process.stdout is not None
        yield process, int(process.stdout.readline())
    finally:
        os.kill(process.pid, signal.SIGCONT)
        process.kill()
        process.wait()
