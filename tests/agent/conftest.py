"""Fixtures the agent tests share (the store server itself is ``store_server``, in ``tests/conftest.py``)."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest
from torch.distributed import TCPStore

from rootcause_engine.agent.death_watcher import DeathWatcher


@pytest.fixture
def server_port(store_server: TCPStore) -> int:
    """The port of a real ``TCPStore`` server on loopback. Each pod of a test connects its own client to it."""
    return store_server.port


@pytest.fixture
def watcher() -> Iterator[DeathWatcher]:
    """A running death watcher (its thread stamps the exits of the pids it is given)."""
    with DeathWatcher() as running:
        yield running


@pytest.fixture
def signal_handlers_restored() -> Iterator[None]:
    """torch's process context installs its own SIGTERM/SIGINT/SIGHUP/SIGQUIT handlers in the agent
    (here: pytest's process); the tests after a launch get the process's handlers back."""
    signals = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
    saved = {signum: signal.getsignal(signum) for signum in signals}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)
