"""What a worker reaches in torch through ``rootcause_engine/upstream/torch_worker.py``: its error file, the
default collective timeout, the Flight Recorder of a real one-rank gloo group, and the wraps of send/recv
and of the default group's init and destroy (each undone after its test)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d

from rootcause_engine.upstream.patching import patched
from rootcause_engine.upstream.torch_worker import (
    flight_recorder_entries,
    flight_recorder_status,
    observe_point_to_point,
    set_default_collective_timeout,
    worker_error_file,
    wrap_default_group_lifecycle,
)

if TYPE_CHECKING:
    from torch.distributed import TCPStore


@pytest.fixture
def gloo_world(store_server: TCPStore) -> Iterator[None]:
    """This process as the only rank of a gloo world over a real loopback ``TCPStore``."""
    dist.init_process_group("gloo", store=store_server, rank=0, world_size=1)
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


@pytest.fixture
def torch_calls_restored() -> Iterator[None]:
    """torch.distributed's send/recv/init/destroy under both names are put back after the test
    (the module's wraps are meant to last for a worker's life)."""
    names = ("send", "recv", "init_process_group", "destroy_process_group")
    originals = {name: getattr(distributed_c10d, name) for name in names}
    with patched(distributed_c10d, **originals), patched(dist, **originals):
        yield


def test_worker_error_file_is_torch_s_error_file_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", "/tmp/attempt_0/3/error.json")
    assert worker_error_file() == "/tmp/attempt_0/3/error.json"
    monkeypatch.delenv("TORCHELASTIC_ERROR_FILE")
    assert worker_error_file() is None


def test_the_default_collective_timeout_is_set_and_the_nccl_one_only_where_torch_has_one() -> None:
    saved = distributed_c10d.default_pg_timeout, distributed_c10d.default_pg_nccl_timeout
    try:
        set_default_collective_timeout(7.5)
        assert distributed_c10d.default_pg_timeout == timedelta(seconds=7.5)
        expected_nccl = None if saved[1] is None else timedelta(seconds=7.5)
        assert distributed_c10d.default_pg_nccl_timeout == expected_nccl
    finally:
        distributed_c10d.default_pg_timeout, distributed_c10d.default_pg_nccl_timeout = saved


def test_the_flight_recorder_status_counts_each_collective_the_group_entered(gloo_world: None) -> None:
    tensor = torch.ones(4)
    dist.all_reduce(tensor)
    first = flight_recorder_status()
    dist.all_reduce(tensor)
    second = flight_recorder_status()
    assert first is not None and second is not None
    moved = {pg: (second[pg], first[pg]) for pg in second if pg in first and second[pg][0] != first[pg][0]}
    assert len(moved) == 1, (first, second)
    ((entered, completed), (entered_before, completed_before)) = next(iter(moved.values()))
    assert entered == entered_before + 1
    # torch marks a collective completed from its work's callback, which may lag the call's return
    assert completed_before <= completed <= entered


def test_the_flight_recorder_entries_end_with_the_collectives_just_entered(gloo_world: None) -> None:
    tensor = torch.ones(2)
    dist.all_reduce(tensor)
    dist.broadcast(tensor, src=0)
    entries = flight_recorder_entries()
    assert entries is not None
    last, before = entries[-1], entries[-2]
    assert (before["profiling_name"], last["profiling_name"]) == ("gloo:all_reduce", "gloo:broadcast")
    assert last["pg_id"] == before["pg_id"]
    assert last["collective_seq_id"] == before["collective_seq_id"] + 1  # type: ignore[operator]


def _recording_observer(calls: list[Any]) -> Callable[[str, int | None, str], Callable[[], None]]:
    def observer(operation: str, peer: int | None, group: str) -> Callable[[], None]:
        calls.append((operation, peer, group))
        return lambda: calls.append(("returned", operation))

    return observer


def test_a_send_tells_the_observer_its_peer_before_torch_runs_it(
    gloo_world: None, torch_calls_restored: None
) -> None:
    calls: list[Any] = []
    observe_point_to_point(_recording_observer(calls))
    assert dist.send is distributed_c10d.send  # both names wrapped alike
    with pytest.raises(ValueError, match="destination rank should not be the same"):
        dist.send(torch.ones(1), dst=0)  # rank 0 of a world of one: torch refuses, after the observer saw it
    with pytest.raises(ValueError, match="destination rank should not be the same"):
        distributed_c10d.send(torch.ones(1), group_dst=0, group=dist.group.WORLD)  # the group-rank form
    group_name = str(dist.group.WORLD.group_name)
    assert calls == [("send", 0, "0"), ("send", 0, group_name)]  # no "returned": both calls raised


def test_a_returned_call_is_told_and_the_observers_errors_never_reach_the_caller(torch_calls_restored: None) -> None:
    sent: list[tuple[Any, ...]] = []

    def send(tensor: Any, dst: int | None = None, group: Any = None, tag: int = 0, group_dst: int | None = None) -> str:
        sent.append((tensor, dst, tag))
        return "sent"

    calls: list[Any] = []
    with patched(distributed_c10d, send=send), patched(dist, send=send):
        observe_point_to_point(_recording_observer(calls))
        assert dist.send("t", 5, tag=3) == "sent"
        assert calls == [("send", 5, "0"), ("returned", "send")] and sent == [("t", 5, 3)]

        def broken(operation: str, peer: int | None, group: str) -> Callable[[], None]:
            raise RuntimeError("observer bug")

        with patched(distributed_c10d, send=send), patched(dist, send=send):
            observe_point_to_point(broken)
            assert dist.send("u", dst=1) == "sent"  # the user's call ran all the same
        assert sent[-1] == ("u", 1, 0)


def test_observing_twice_wraps_once(torch_calls_restored: None) -> None:
    torch_send = distributed_c10d.send
    calls: list[Any] = []
    observe_point_to_point(_recording_observer(calls))
    wrapped = distributed_c10d.send, distributed_c10d.recv
    observe_point_to_point(_recording_observer(calls))
    assert (distributed_c10d.send, distributed_c10d.recv) == wrapped
    assert wrapped[0] is not torch_send and wrapped[0].__wrapped__ is torch_send  # type: ignore[attr-defined]


def test_the_default_group_s_init_and_destroy_go_through_the_callables(
    store_server: TCPStore, torch_calls_restored: None
) -> None:
    events: list[str] = []

    def around_init(init: Callable[[], None]) -> None:
        events.append("before init")
        init()
        events.append(f"after init: world of {dist.get_world_size()}")

    wrap_default_group_lifecycle(around_init, lambda: events.append(f"before destroy: {dist.is_initialized()}"))
    wrap_default_group_lifecycle(lambda init: None, lambda: None)  # once per process: this one is ignored
    try:
        dist.init_process_group("gloo", store=store_server, rank=0, world_size=1)
        subgroup = dist.new_group([0])
        distributed_c10d.destroy_process_group(subgroup)  # not the default group: no callable
        assert events == ["before init", "after init: world of 1"]
        dist.destroy_process_group()
        assert events[-1] == "before destroy: True" and not dist.is_initialized()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def test_a_destroy_after_the_callable_already_left_the_group_does_not_fail(
    store_server: TCPStore, torch_calls_restored: None
) -> None:
    original_destroy = distributed_c10d.destroy_process_group
    wrap_default_group_lifecycle(lambda init: init(), original_destroy)  # leaving destroys the group itself
    dist.init_process_group("gloo", store=store_server, rank=0, world_size=1)
    dist.destroy_process_group()
    assert not dist.is_initialized()
