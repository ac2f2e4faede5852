"""Shared pytest fixtures: real object stores on loopback, started once per session.

Also hypothesis's defaults for this suite: no per-example deadline and no "too slow" health check.
Both are wall-clock limits (200 ms per example, data generation speed) that a busy shared CPU
breaks at random; the properties themselves hold on any machine.

It also provides real c10d ``TCPStore`` servers on loopback (``testbed.tcp_store``), one for each
test that asks. Both the agent tests and the soft-restart tests run their code on one. The agent's
death watcher and the soft-restart worker channel are fixtures here too, for the tests of their modules
and the scenarios that use them.

Every process the suite starts talks over loopback only, so its DNS waits are bounded
(``rootcause_harness.loopback.bound_dns_waits`` says why: torch's reverse lookups of loopback peers).

And the order tests run in: the ``slow`` ones (real launches, tens of seconds each) first, so that
under ``pytest -n 2`` the quick ones fill in at the end and no worker is left alone with a
half-minute launch while the other idles.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, settings

from rootcause_harness.loopback import bound_dns_waits
from testbed.object_stores import ObjectStore, fake_gcs_store, local_store, moto_s3_store

if TYPE_CHECKING:
    from torch.distributed import PrefixStore, TCPStore

    from rootcause_engine.agent.death_watcher import DeathWatcher
    from rootcause_engine.agent.worker_channel import WorkerChannel

bound_dns_waits(os.environ)  # before any test starts a process: they all inherit it
# gcsfs reads this once, when it is first imported (a test module may import it at collection, before
# any store fixture sets it): unset, every gcsfs instance first waits up to 60 s on a gRPC probe of
# the bucket's type, which the loopback fake-gcs-server never answers
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

settings.register_profile("rootcause", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("rootcause")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the ``slow`` tests first (a stable sort: each group keeps its collected order)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="session")
def gcs_store() -> Iterator[ObjectStore]:
    with fake_gcs_store() as store:
        yield store


@pytest.fixture(scope="session")
def s3_store() -> Iterator[ObjectStore]:
    with moto_s3_store() as store:
        yield store


@pytest.fixture()
def file_store() -> Iterator[ObjectStore]:
    with local_store() as store:
        yield store


@pytest.fixture(params=["local", "gcs", "s3"])
def any_store(request: pytest.FixtureRequest) -> ObjectStore:
    """Each test using this runs once per store kind: local folder, fake-gcs-server, moto S3."""
    name = {"local": "file_store", "gcs": "gcs_store", "s3": "s3_store"}[request.param]
    return request.getfixturevalue(name)


@pytest.fixture
def store_server() -> TCPStore:
    """A real ``TCPStore`` server on a free loopback port, as the rendezvous store's host runs it.

    Held for the test's duration (pytest keeps the fixture's value), then dropped. torch is imported here,
    not at the top: a test run that never asks for a store does not load it.
    """
    from testbed.tcp_store import master_store

    return master_store()


@pytest.fixture
def prefixed_store(store_server: TCPStore) -> PrefixStore:
    """``store_server`` seen through a ``PrefixStore``, as a rendezvous round's store is.

    torch's rendezvous hands each round the job's store under a prefix of its own. The code under test
    gets the same wrapper, so its keys go through the same prefixing as in a job.
    """
    from torch.distributed import PrefixStore

    return PrefixStore("round0", store_server)


@pytest.fixture
def server_port(store_server: TCPStore) -> int:
    """The port of a real ``TCPStore`` server on loopback. Each pod of a test connects its own client to it."""
    return store_server.port


@pytest.fixture()
def processes() -> Iterator[list[subprocess.Popen[Any]]]:
    """Subprocesses a test starts and appends here: killed and reaped at its end, whatever it left."""
    started: list[subprocess.Popen[Any]] = []
    yield started
    for process in started:
        process.kill()
        process.wait()


@pytest.fixture
def watcher() -> Iterator[DeathWatcher]:
    """A running death watcher (its thread stamps the exits of the pids it is given)."""
    from rootcause_engine.agent.death_watcher import DeathWatcher

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


@pytest.fixture
def channel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> WorkerChannel:
    """The soft-restart file channel, with this process playing a local rank 0 worker whose agent writes events."""
    from rootcause_engine import soft_restart
    from rootcause_engine.agent.worker_channel import WorkerChannel
    from rootcause_engine.worker.world_events import EVENTS_DIR_VARIABLE

    monkeypatch.setenv(EVENTS_DIR_VARIABLE, str(tmp_path))
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setattr(soft_restart, "_channel", None)
    return WorkerChannel(str(tmp_path))
