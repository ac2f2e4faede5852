"""The agent parts a soft-restart run loop gets (``rootcause_engine/upstream/torch_agent_loop.py``), over torch's
real worker group and a real loopback ``TCPStore``, and the launcher patch that installs the loop."""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest
from torch.distributed import HashStore, PrefixStore
from torch.distributed.elastic.agent.server.api import RunResult, WorkerGroup, WorkerSpec, WorkerState
from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure
from torch.distributed.launcher import api as launcher_api

from rootcause_engine.upstream.torch_agent_loop import (
    AgentParts,
    agent_class_with_loop,
    is_failed,
    is_healthy,
    is_succeeded,
    launcher_agent_with_loop,
)

if TYPE_CHECKING:
    from torch.distributed import TCPStore


class _Handler:
    """The parts of torch's c10d rendezvous handler the loop reads: its store and run id."""

    def __init__(self, store: Any, use_agent_store: bool = True) -> None:
        self._store = store
        self.use_agent_store = use_agent_store

    def get_run_id(self) -> str:
        return "run-7"


class _Agent:
    """Stands in for a ``LocalElasticAgent`` around a real ``WorkerGroup``: its start/poll/stop record the calls."""

    def __init__(self, handler: Any, local_world_size: int = 2) -> None:
        spec = WorkerSpec(
            role="trainer", local_world_size=local_world_size, rdzv_handler=handler, entrypoint="/usr/bin/train"
        )
        self._worker_group = WorkerGroup(spec)
        self._worker_group.master_addr, self._worker_group.master_port = "10.0.0.9", 29400
        self._remaining_restarts = 3
        self._pcontext = SimpleNamespace(pids=lambda: {0: 101, 1: 102})
        self.calls: list[str] = []

    def _start_workers(self, group: WorkerGroup) -> dict[int, int]:
        self.calls.append("start")
        return {0: 101, 1: 102}

    def _stop_workers(self, group: WorkerGroup) -> None:
        self.calls.append("stop")

    def _monitor_workers(self, group: WorkerGroup) -> RunResult:
        self.calls.append("monitor")
        return RunResult(state=WorkerState.UNHEALTHY)

    def _exit_barrier(self) -> None:
        self.calls.append("exit barrier")

    def _rendezvous(self, group: WorkerGroup) -> None:
        self.calls.append("rendezvous")
        group.group_rank, group.group_world_size = 1, 3


def test_the_round_reads_torch_s_rendezvous_result() -> None:
    agent = _Agent(_Handler(None))
    parts = AgentParts(agent)
    parts.round.rendezvous()
    assert agent.calls == ["rendezvous"]
    assert (parts.round.group_rank, parts.round.group_world_size) == (1, 3)
    assert (parts.round.master_addr, parts.round.master_port) == ("10.0.0.9", 29400)


def test_the_workers_meet_at_the_store_server_under_the_round_s_prefixes(store_server: TCPStore) -> None:
    agent = _Agent(_Handler(store_server))
    agent._worker_group.store = PrefixStore("round/1", PrefixStore("torchelastic", store_server))
    assert AgentParts(agent).round.world_store_address == ("127.0.0.1", store_server.port)


def test_without_a_tcp_store_below_the_workers_meet_at_torch_s_master_address() -> None:
    agent = _Agent(_Handler(None))
    agent._worker_group.store = PrefixStore("round/1", HashStore())
    assert AgentParts(agent).round.world_store_address == ("10.0.0.9", 29400)


def test_the_job_store_is_the_rendezvous_store_under_the_run_s_prefix(store_server: TCPStore) -> None:
    round_ = AgentParts(_Agent(_Handler(store_server))).round
    job_store = round_.job_store
    assert job_store is not None
    job_store.set("members", "3")
    assert store_server.get("rootcause/run-7/members") == b"3"
    assert AgentParts(_Agent(_Handler(None))).round.job_store is None  # a handler that keeps no store


def test_sharing_the_rendezvous_store_is_the_handler_s_setting() -> None:
    assert AgentParts(_Agent(_Handler(None, use_agent_store=True))).round.shares_rendezvous_store is True
    assert AgentParts(_Agent(_Handler(None, use_agent_store=False))).round.shares_rendezvous_store is False


def test_a_pod_entering_a_running_job_takes_its_place_without_a_rendezvous(store_server: TCPStore) -> None:
    agent = _Agent(_Handler(store_server), local_world_size=2)
    parts = AgentParts(agent)
    parts.round.enter_running_job(group_rank=2, group_world_size=3)
    group = agent._worker_group
    assert agent.calls == []  # no rendezvous
    assert agent._store is store_server and group.store is store_server
    assert (group.group_rank, group.group_world_size) == (2, 3)
    assert (group.master_addr, group.master_port) == ("127.0.0.1", store_server.port)
    assert parts.workers.ranks() == {0: (4, 6), 1: (5, 6)}


def test_started_workers_get_their_pids_and_a_healthy_group() -> None:
    agent = _Agent(_Handler(None))
    workers = AgentParts(agent).workers
    assert workers.start() == {0: 101, 1: 102}
    assert [w.id for w in agent._worker_group.workers] == [101, 102]
    assert agent._worker_group.state == WorkerState.HEALTHY
    assert workers.pids() == {0: 101, 1: 102}
    assert workers.local_world_size == 2 and workers.monitor_interval == pytest.approx(0.1)


def test_a_poll_sets_the_group_s_state_and_stop_calls_torch_s() -> None:
    agent = _Agent(_Handler(None))
    workers = AgentParts(agent).workers
    result = workers.poll()
    assert result.state == WorkerState.UNHEALTHY and agent._worker_group.state == WorkerState.UNHEALTHY
    workers.stop()
    assert agent.calls == ["monitor", "stop"]


def test_set_ranks_numbers_the_node_s_workers_consecutively() -> None:
    agent = _Agent(_Handler(None), local_world_size=3)
    workers = AgentParts(agent).workers
    workers.set_ranks(6, 12)
    assert workers.ranks() == {0: (6, 12), 1: (7, 12), 2: (8, 12)}
    assert [(w.role_rank, w.role_world_size) for w in agent._worker_group.workers] == [(6, 12), (7, 12), (8, 12)]


def test_the_ending_counts_restarts_down_and_passes_the_exit_barrier() -> None:
    agent = _Agent(_Handler(None))
    ending = AgentParts(agent).ending
    ending.use_restart()
    ending.use_restart()
    assert ending.remaining_restarts == 1 and agent._remaining_restarts == 1
    ending.exit_barrier()
    assert agent.calls == ["exit barrier"]


def test_a_failed_run_becomes_torch_s_child_failed_error_naming_the_entrypoint() -> None:
    failure = ProcessFailure(local_rank=0, pid=101, exitcode=3, error_file="/nonexistent/error.json")
    result = RunResult(state=WorkerState.FAILED, failures={4: failure})
    error = AgentParts(_Agent(_Handler(None))).ending.child_failed_error(result)
    assert isinstance(error, ChildFailedError)
    assert error.name == "train" and error.failures == {4: failure}


def test_a_node_ended_elsewhere_returns_success_for_ranks_below_zero_without_values() -> None:
    agent = _Agent(_Handler(None), local_world_size=3)
    parts = AgentParts(agent)
    parts.workers.set_ranks(3, 6)
    result = parts.ending.finished_without_results()
    assert result.state == WorkerState.SUCCEEDED
    assert result.return_values == {-3: None, -2: None, -1: None}
    assert parts.workers.ranks() == {0: (-3, 3), 1: (-2, 3), 2: (-1, 3)}


@pytest.mark.parametrize(
    ("state", "succeeded", "failed", "healthy"),
    [
        (WorkerState.SUCCEEDED, True, False, False),
        (WorkerState.FAILED, False, True, False),
        (WorkerState.UNHEALTHY, False, True, False),
        (WorkerState.HEALTHY, False, False, True),
        (WorkerState.STOPPED, False, False, False),
    ],
)
def test_result_states(state: WorkerState, succeeded: bool, failed: bool, healthy: bool) -> None:
    result = RunResult(state=state)
    assert (is_succeeded(result), is_failed(result), is_healthy(result)) == (succeeded, failed, healthy)


def test_the_agent_class_runs_the_loop_with_its_parts() -> None:
    seen: list[AgentParts] = []

    def loop(parts: AgentParts) -> RunResult:
        seen.append(parts)
        return RunResult(state=WorkerState.SUCCEEDED, return_values={0: "done"})

    looped = agent_class_with_loop(loop)
    assert issubclass(looped, LocalElasticAgent) and looped.__name__ == "LoopedElasticAgent"
    agent = object.__new__(looped)
    agent._worker_group = WorkerGroup(WorkerSpec(role="r", local_world_size=1, rdzv_handler=None, entrypoint="t"))  # type: ignore[arg-type]
    assert agent._invoke_run().return_values == {0: "done"}
    (parts,) = seen
    assert parts.workers.local_world_size == 1


def test_the_launcher_builds_looped_agents_for_the_block_only() -> None:
    torch_agent = launcher_api.LocalElasticAgent
    with launcher_agent_with_loop(lambda parts: RunResult(state=WorkerState.SUCCEEDED)):
        looped = launcher_api.LocalElasticAgent
        assert looped is not torch_agent and issubclass(looped, torch_agent)
        assert "_invoke_run" in vars(looped)
    assert launcher_api.LocalElasticAgent is torch_agent
