"""``flytekitplugins_rootcause.soft_restart``: the name users import the engine's soft-restart API by,
used as a training loop uses it, over a real worker channel."""

from __future__ import annotations

import time

import pytest

from flytekitplugins_rootcause import soft_restart as public
from rootcause_engine import soft_restart as engine
from rootcause_engine.agent.worker_channel import WorkerChannel
from rootcause_engine.worker.world_events import EVENTS_DIR_VARIABLE


def _info(version: int) -> public.WorkerInfo:
    return public.WorkerInfo(0, 1, 1, 1, 2, 2, "127.0.0.1", 29500, version)


def test_a_star_import_gives_exactly_the_engine_s_public_api() -> None:
    namespace: dict[str, object] = {}
    exec("from flytekitplugins_rootcause.soft_restart import *", namespace)
    names = {name for name in namespace if name != "__builtins__"}
    assert names == set(engine.__all__)
    assert all(namespace[name] is getattr(engine, name) for name in names)


def test_a_loop_through_the_public_name_sees_its_agent_s_new_world(channel: WorkerChannel) -> None:
    channel.start_fresh(0, public.WorkerEvent(time.time(), public.WorkerState.HEALTHY, None, _info(1)))
    assert public.enabled()
    assert public.get_worker_info(timeout_s=5) == _info(1)
    channel.publish(0, public.WorkerEvent(time.time(), public.WorkerState.HEALTHY,
                                          public.WorldChangeEvent.SCALE_DOWN, _info(2)))
    event = public.get_worker_event()
    assert event.change_event is public.WorldChangeEvent.SCALE_DOWN
    assert public.get_worker_info(timeout_s=5, newer_than=1).world_version == 2


def test_outside_a_soft_restart_launch_the_public_api_says_how_to_turn_it_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(EVENTS_DIR_VARIABLE, raising=False)
    monkeypatch.setattr(engine, "_channel", None)
    assert not public.enabled()
    with pytest.raises(RuntimeError, match=f'{EVENTS_DIR_VARIABLE} is not set.*restart_policy="soft"'):
        public.world_changed()
