"""The file channel between an agent and its workers, and the worker API on top of it (no torch launch)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from rootcause_engine import soft_restart
from rootcause_engine.agent.worker_channel import WorkerChannel
from rootcause_engine.worker.world_events import (
    EVENTS_DIR_VARIABLE,
    WorkerEvent,
    WorkerInfo,
    WorkerState,
    WorldChangeEvent,
    events_path,
    read_events,
)


def _info(version: int, rank: int = 1, world_size: int = 2) -> WorkerInfo:
    return WorkerInfo(0, rank, rank, 1, world_size, world_size, "127.0.0.1", 29500, version)


def _healthy(version: int, change: WorldChangeEvent | None = None) -> WorkerEvent:
    return WorkerEvent(time.time(), WorkerState.HEALTHY, change, _info(version))


def test_events_travel_in_order_and_a_line_being_written_is_left_for_later(tmp_path: Path) -> None:
    channel = WorkerChannel(str(tmp_path))
    channel.start_fresh(0, WorkerEvent(1.0, WorkerState.PAUSED))
    channel.publish(0, _healthy(1, WorldChangeEvent.SCALE_DOWN))
    with open(events_path(tmp_path, 0), "a") as handle:
        handle.write('{"timestamp": 3.0, "worker_st')  # the agent is mid-write
    events = read_events(events_path(tmp_path, 0))
    assert [e.worker_state for e in events] == [WorkerState.PAUSED, WorkerState.HEALTHY]
    assert events[1].worker_info == _info(1) and events[1].change_event is WorldChangeEvent.SCALE_DOWN


def test_a_line_that_is_not_an_event_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="not a soft-restart worker event"):
        WorkerEvent.from_line('{"hello": 1}')


def test_a_restarted_worker_sees_only_its_own_events(channel: WorkerChannel) -> None:
    channel.start_fresh(0, _healthy(3))
    channel.start_fresh(0, WorkerEvent(time.time(), WorkerState.PAUSED, WorldChangeEvent.SCALE_UP))
    assert [e.worker_state for e in read_events(events_path(channel.directory, 0))] == [WorkerState.PAUSED]


def test_get_worker_info_waits_while_paused_says_it_waits_and_returns_the_next_world(channel: WorkerChannel) -> None:
    channel.start_fresh(0, WorkerEvent(time.time(), WorkerState.PAUSED, WorldChangeEvent.SCALE_UP))
    assert soft_restart.enabled() and soft_restart.world_changed()
    got: list[WorkerInfo] = []
    waiter = threading.Thread(target=lambda: got.append(soft_restart.get_worker_info(timeout_s=30)))
    waiter.start()
    while not channel.waiting({0: os.getpid()}):
        time.sleep(0.005)
    assert not got  # still paused
    channel.publish(0, _healthy(2, WorldChangeEvent.SCALE_UP))
    waiter.join(timeout=30)
    assert got == [_info(2)]
    assert soft_restart.get_worker_event().change_event is WorldChangeEvent.SCALE_UP


def test_a_worker_waits_for_a_world_newer_than_the_one_that_failed(channel: WorkerChannel) -> None:
    channel.start_fresh(0, _healthy(1))
    with pytest.raises(TimeoutError, match="no new world"):
        soft_restart.get_worker_info(timeout_s=0.05, newer_than=1)
    channel.publish(0, _healthy(2))
    assert soft_restart.get_worker_info(timeout_s=5, newer_than=1).world_version == 2


def test_the_api_outside_a_soft_restart_launch_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(EVENTS_DIR_VARIABLE, raising=False)
    monkeypatch.setattr(soft_restart, "_channel", None)
    assert not soft_restart.enabled()
    with pytest.raises(RuntimeError, match='restart_policy="soft"'):
        soft_restart.get_worker_event()


def test_pg_parameters_name_the_world_s_own_store_prefix_rank_and_size() -> None:
    from testbed.tcp_store import LOOPBACK, master_store

    server = master_store()  # port 0: the kernel's free port, no race with another test
    info = WorkerInfo(0, 0, 0, 1, 1, 1, LOOPBACK, server.port, world_version=7)
    params = info.get_pg_parameters()
    assert (params["rank"], params["world_size"]) == (0, 1)
    params["store"].set("k", "v")
    assert server.get("rootcause/soft/pg/7/k") == b"v"


def test_the_plugin_s_public_name_is_the_engine_s_api() -> None:
    """``from flytekitplugins_rootcause import soft_restart`` (what users write) is the engine's API."""
    from flytekitplugins_rootcause import soft_restart as public

    assert public.__all__ == soft_restart.__all__
    assert all(getattr(public, name) is getattr(soft_restart, name) for name in soft_restart.__all__)
