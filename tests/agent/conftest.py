"""Fixtures the agent tests share."""

from __future__ import annotations

import datetime
from collections.abc import Iterator

import pytest
from torch.distributed import TCPStore


@pytest.fixture
def server_port() -> Iterator[int]:
    """A real ``TCPStore`` server on a free loopback port, as the rendezvous store's host runs it."""
    server = TCPStore("127.0.0.1", 0, is_master=True, timeout=datetime.timedelta(seconds=10), wait_for_workers=False)
    yield server.port
