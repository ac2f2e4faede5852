"""NCCL/process settings: applied to the workers' environment only where the user has not set them."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest

from flytekitplugins_rootcause.config import ElasticRootCause
from rootcause_engine.worker.process_settings import (
    BeforeUserFunction,
    WorkerProcessSettings,
    agent_environment,
    applied_environment,
    before_user_function,
    unset_only,
)
from tests.watchdog_tasks import tasks


def test_defaults_ask_for_every_setting() -> None:
    assert agent_environment(ElasticRootCause(nproc_per_node=4)) == {
        "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "300",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
        "TORCH_FR_BUFFER_SIZE": "2000",
        "ROOTCAUSE_PROGRESS_BEACON_S": "2.0",  # the hang watch reads each worker's beacon
    }


def test_a_hard_policy_that_restarts_gives_workers_a_store_of_their_own() -> None:
    """torch 2.13's hard restarts of a multi-pod job never finish ``init_process_group`` on the shared
    rendezvous store; the soft policy needs that store (each world's process group meets there)."""
    restarting = agent_environment(ElasticRootCause(nproc_per_node=1, max_restarts=2))
    assert restarting["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in agent_environment(ElasticRootCause(nproc_per_node=1))
    soft = ElasticRootCause(nnodes="1:2", nproc_per_node=1, max_restarts=2, restart_policy="soft")
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in agent_environment(soft)


def test_each_setting_can_be_left_to_torch() -> None:
    config = ElasticRootCause(
        nproc_per_node=1,
        nccl_heartbeat_timeout_s=None,
        nccl_async_error_handling=None,
        unbuffered_output=False,
        flight_recorder_entries=None,
        hang_after_s=None,
    )
    assert agent_environment(config) == {}  # one worker per node: OpenMP may use the cores


def test_the_users_values_win() -> None:
    wanted = {"A": "1", "B": "2"}
    assert unset_only(wanted, {"A": "user"}) == {"B": "2"}
    environ = {"A": "user"}
    with applied_environment(wanted, environ) as applied:
        assert applied == {"B": "2"} and environ == {"A": "user", "B": "2"}
    assert environ == {"A": "user"}  # only what was applied is taken back


def test_a_flight_recorder_size_set_under_torch_s_older_name_wins() -> None:
    wanted = agent_environment(ElasticRootCause(nproc_per_node=1))
    assert "TORCH_FR_BUFFER_SIZE" not in unset_only(wanted, {"TORCH_NCCL_TRACE_BUFFER_SIZE": "100"})
    assert unset_only(wanted, {})["TORCH_FR_BUFFER_SIZE"] == "2000"


def test_hooks_compose_in_order() -> None:
    calls: list[str] = []
    assert before_user_function([None, None]) is None
    single = WorkerProcessSettings()
    assert before_user_function([single, None]) is single
    composed = before_user_function([lambda: calls.append("settings"), None, lambda: calls.append("straggler")])
    assert isinstance(composed, BeforeUserFunction)
    composed()
    assert calls == ["settings", "straggler"]


#: A torch backend that records the timeout torch builds each new process group with.
PROBE_BACKEND = "rootcause_timeout_probe"
_timeouts_given: list[timedelta] = []


def timeouts_given_to_new_backends() -> list[timedelta]:
    """Every timeout torch has built a group of :data:`PROBE_BACKEND` with, in order.

    torch has no public getter for a process group's timeout. Its public hook for backends,
    ``Backend.register_backend``, is called with ``(store, rank, world_size, timeout)`` where
    ``timeout`` is what ``init_process_group``/``new_group`` resolved, the value gloo and NCCL are
    built with; so a backend registered here (a real gloo group underneath) sees what they would see.
    """
    import torch.distributed as dist

    if not hasattr(dist.Backend, PROBE_BACKEND.upper()):  # registration lasts for the process

        def create(store: dist.Store, rank: int, world_size: int, timeout: timedelta) -> dist.ProcessGroupGloo:
            _timeouts_given.append(timeout)
            return dist.ProcessGroupGloo(store, rank, world_size, timeout)

        dist.Backend.register_backend(PROBE_BACKEND, create, devices=["cpu"])
    return _timeouts_given


def test_collective_timeout_becomes_the_default_of_new_process_groups() -> None:
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    given = timeouts_given_to_new_backends()
    given.clear()
    saved = distributed_c10d.default_pg_timeout, distributed_c10d.default_pg_nccl_timeout
    assert not dist.is_initialized()
    try:
        WorkerProcessSettings(collective_timeout_s=42)()
        dist.init_process_group(PROBE_BACKEND, store=dist.HashStore(), rank=0, world_size=1)
        dist.new_group([0])
        dist.new_group([0], timeout=timedelta(seconds=7))  # a timeout the user passes still wins
        assert given == [timedelta(seconds=42), timedelta(seconds=42), timedelta(seconds=7)]
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        distributed_c10d.default_pg_timeout, distributed_c10d.default_pg_nccl_timeout = saved


@pytest.mark.slow
def test_workers_get_the_settings_and_the_users_value_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", "1234")  # the user's, in the pod spec
    for name in ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "OMP_NUM_THREADS", "PYTHONUNBUFFERED", "TORCH_FR_BUFFER_SIZE",
                 "TORCH_NCCL_TRACE_BUFFER_SIZE"):
        monkeypatch.delenv(name, raising=False)
    report = tasks.reports_settings(marker_dir=str(tmp_path))
    assert report["TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"] == "1234"
    # torch's agent would put 1 here; the config's value reached the worker
    assert report["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == str(tasks.ASYNC_ERROR_HANDLING)
    assert report["OMP_NUM_THREADS"] == "1"
    assert report["PYTHONUNBUFFERED"] == "1"
    assert report["TORCH_FR_BUFFER_SIZE"] == "2000"  # the Flight Recorder that names a hung rank
    # a collective the peer never joins fails with the configured timeout, not torch's 30 minutes:
    # gloo's error names the timeout it waited (how long that took is no test of the setting)
    assert report["collective"] != "completed"
    assert f"Timed out waiting {tasks.COLLECTIVE_TIMEOUT_S * 1000:.0f}ms" in report["collective"], report["collective"]
    # the agent's environment is as the user left it
    assert "PYTHONUNBUFFERED" not in os.environ and "TORCH_NCCL_ASYNC_ERROR_HANDLING" not in os.environ
    assert os.environ["TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"] == "1234"
