"""How a launch replaces torch elastic's agent run loop (the soft-restart policy), and what the loop may touch.

torch's ``SimpleElasticAgent._invoke_run`` is the whole restart policy: rendezvous, start, poll,
and on any failure stop everything and rendezvous again. A different policy needs a different
loop over the same parts. :func:`launcher_agent_with_loop` makes, for one launch, a subclass of
``LocalElasticAgent`` whose ``_invoke_run`` calls the given loop, and puts it where
``torch.distributed.launcher.api.launch_agent`` looks its agent class up (a module global); the
loop gets an :class:`AgentParts`, public names for the agent's protected parts (the node's
round, its workers, the run's ending), so the policy itself
(:mod:`rootcause_engine.agent.soft_restart_agent`) holds no torch internals.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from torch.distributed import PrefixStore, TCPStore
from torch.distributed.elastic.agent.server.api import RunResult, Worker, WorkerState
from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.launcher import api as launcher_api

from rootcause_engine.upstream.patching import patched
from rootcause_engine.upstream.torch_elastic import torch_symbol as _torch
from rootcause_engine.upstream.versions import Symbol, require

_LAUNCHER = "torch.distributed.launcher.api"
_RDZV = "torch.distributed.elastic.rendezvous.dynamic_rendezvous"
_AGENT = "torch.distributed.elastic.agent.server.local_elastic_agent"
_API = "torch.distributed.elastic.agent.server.api"


SYMBOLS: tuple[Symbol, ...] = (
    _torch(_LAUNCHER, "LocalElasticAgent", "replaces for a launch, with an agent running another restart policy"),
    _torch(_API, "SimpleElasticAgent._invoke_run", "overrides: the run loop is the restart policy"),
    _torch(_API, "SimpleElasticAgent._worker_group", "reads, the loop's worker group", instance_attribute=True),
    _torch(_API, "SimpleElasticAgent._remaining_restarts", "reads and counts down", instance_attribute=True),
    _torch(_AGENT, "LocalElasticAgent._pcontext", "reads, for the running workers' pids", instance_attribute=True),
    _torch(_API, "SimpleElasticAgent._store", "sets, for a pod that joins a running job without a rendezvous",
           instance_attribute=True),
    _torch(_API, "Worker", "makes, the workers of a pod that joins a running job"),
    _torch(_RDZV, "DynamicRendezvousHandler._store", "reads, the job's store outside any rendezvous round",
           instance_attribute=True),
    _torch(_AGENT, "LocalElasticAgent._start_workers", "calls, to start this node's workers"),
    _torch(_AGENT, "LocalElasticAgent._stop_workers", "calls, to stop this node's workers"),
    _torch(_AGENT, "LocalElasticAgent._monitor_workers", "calls, to poll this node's workers"),
    *(
        _torch(_API, path, "reads, for the workers' place in the job", instance_attribute=True)
        for path in ("WorkerGroup.spec", "WorkerGroup.master_addr", "WorkerGroup.master_port",
                     "WorkerSpec.rdzv_handler")
    ),
    *(
        _torch(_API, path, "sets, so return values follow the ranks of each new world", instance_attribute=True)
        for path in ("Worker.local_rank", "Worker.role_rank", "Worker.world_size", "Worker.role_world_size",
                     "Worker.id")
    ),
)


class AgentRound:
    """This node's place in the job: its rank among the nodes, the stores and the workers' meeting point.

    Filled by torch's rendezvous, or by :meth:`enter_running_job` for a pod that joins a job already
    running.
    """

    def __init__(self, agent: Any, workers: AgentWorkers) -> None:
        self._agent = agent
        self._workers = workers

    @property
    def group_rank(self) -> int:
        return int(self._agent._worker_group.group_rank)

    @property
    def group_world_size(self) -> int:
        return int(self._agent._worker_group.group_world_size)

    @property
    def store(self) -> Any:
        """The first rendezvous round's store (torch's c10d rendezvous store, scoped to the round)."""
        return self._agent._worker_group.store

    @property
    def job_store(self) -> Any | None:
        """The rendezvous store outside any round, scoped to the job's run id: what a pod can reach
        before (or instead of) a rendezvous, to find a job already running. ``None`` where the
        rendezvous handler keeps no store (not the c10d handler)."""
        handler = self._agent._worker_group.spec.rdzv_handler
        store = getattr(handler, "_store", None)
        if store is None:
            return None
        return PrefixStore(f"rootcause/{handler.get_run_id()}", store)

    @property
    def master_addr(self) -> str:
        return str(self._agent._worker_group.master_addr)

    @property
    def master_port(self) -> int:
        return int(self._agent._worker_group.master_port)

    @property
    def world_store_address(self) -> tuple[str, int]:
        """Where the workers' process group of every soft world meets: the rendezvous store's own
        server (the ``rdzv_endpoint`` pod's), found under the round's prefix store; torch's
        ``master_addr:master_port`` where it is no ``TCPStore``. torch 2.13 serves its workers' shared
        store from the first round's rank-0 pod, a second pod the job could not lose; here the pod
        that holds the soft world's log is the only one."""
        store = self._agent._worker_group.store
        for _ in range(8):  # prefix stores over prefix stores, down to the server's client
            if isinstance(store, TCPStore):
                return str(store.host), int(store.port)
            store = getattr(store, "underlying_store", None)
            if store is None:
                break
        return self.master_addr, self.master_port

    @property
    def shares_rendezvous_store(self) -> bool:
        """Whether workers reach the rendezvous' TCPStore at ``master_addr:master_port`` (torch's default;
        ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` turns it off)."""
        return bool(self._agent._worker_group.spec.rdzv_handler.use_agent_store)

    def rendezvous(self) -> None:
        self._agent._rendezvous(self._agent._worker_group)

    def enter_running_job(self, group_rank: int, group_world_size: int) -> None:
        """Take a place in a job already running, without torch's rendezvous (whose round is long
        closed: a late pod would wait in it for a round that never comes). The workers' store and
        master address are the rendezvous store's own, as for every soft world."""
        agent, group = self._agent, self._agent._worker_group
        handler = group.spec.rdzv_handler
        store = handler._store
        agent._store = store
        group.store = store
        group.group_rank, group.group_world_size = group_rank, group_world_size
        group.workers = [Worker(local_rank=local_rank) for local_rank in range(group.spec.local_world_size)]
        group.master_addr, group.master_port = self.world_store_address
        local_world_size = self._workers.local_world_size
        self._workers.set_ranks(group_rank * local_world_size, group_world_size * local_world_size)


class AgentWorkers:
    """This node's worker processes: start, poll and stop them, and the ranks torch gives them."""

    def __init__(self, agent: Any) -> None:
        self._agent = agent

    @property
    def local_world_size(self) -> int:
        return int(self._agent._worker_group.spec.local_world_size)

    @property
    def monitor_interval(self) -> float:
        return float(self._agent._worker_group.spec.monitor_interval)

    def start(self) -> dict[int, int]:
        """Start this node's workers (a new attempt); local rank -> pid."""
        group = self._agent._worker_group
        pids = self._agent._start_workers(group)
        for local_rank, pid in pids.items():
            group.workers[local_rank].id = pid
        group.state = WorkerState.HEALTHY
        return dict(pids)

    def stop(self) -> None:
        self._agent._stop_workers(self._agent._worker_group)

    def pids(self) -> dict[int, int]:
        return dict(self._agent._pcontext.pids())

    def poll(self) -> RunResult:
        group = self._agent._worker_group
        result = self._agent._monitor_workers(group)
        group.state = result.state
        return result

    def ranks(self) -> dict[int, tuple[int, int]]:
        """Local rank -> (global rank, world size), as torch's worker group has them now."""
        return {w.local_rank: (w.global_rank, w.world_size) for w in self._agent._worker_group.workers}

    def set_ranks(self, first_global_rank: int, world_size: int) -> None:
        """Give this node's workers consecutive global ranks from ``first_global_rank`` in ``world_size``."""
        for worker in self._agent._worker_group.workers:
            worker.global_rank = worker.role_rank = first_global_rank + worker.local_rank
            worker.world_size = worker.role_world_size = world_size


class AgentEnding:
    """How this node's run ends: a success waits at torch's exit barrier; a failure uses one of the
    restarts or ends as torch's ``ChildFailedError``; a node whose training ended elsewhere returns
    no results."""

    def __init__(self, agent: Any, workers: AgentWorkers) -> None:
        self._agent = agent
        self._workers = workers

    @property
    def remaining_restarts(self) -> int:
        return int(self._agent._remaining_restarts)

    def use_restart(self) -> None:
        """Count one restart (the next workers' ``TORCHELASTIC_RESTART_COUNT`` is one higher)."""
        self._agent._remaining_restarts -= 1

    def exit_barrier(self) -> None:
        self._agent._exit_barrier()

    def child_failed_error(self, result: RunResult) -> ChildFailedError:
        """What torch's launcher raises for a failed ``result``."""
        return ChildFailedError(self._agent._worker_group.spec.get_entrypoint_name(), result.failures)

    def finished_without_results(self) -> RunResult:
        """What a node returns whose workers were stopped because the training ended elsewhere.

        Its workers hold no rank of the final world: they get ranks below 0 (-n to -1), each with no
        return value. torch's agent records an event per worker of a succeeded run and refuses one
        with neither a failure nor a return value (``ValueError: Unknown worker``); and kfpytorch
        returns rank 0's value as the task's output, which this node must not claim (it then ignores
        its outputs, as every node but rank 0's does).
        """
        local_world_size = self._workers.local_world_size
        self._workers.set_ranks(-local_world_size, local_world_size)
        ranks = [worker.global_rank for worker in self._agent._worker_group.workers]
        return RunResult(state=WorkerState.SUCCEEDED, return_values=dict.fromkeys(ranks))


class AgentParts:
    """The parts of one torch agent a run loop uses, under public names, one object per responsibility:
    ``round`` (this node's place in the job), ``workers`` (its processes), ``ending`` (exit barrier,
    restarts, the error torch raises)."""

    def __init__(self, agent: Any) -> None:
        self.workers = AgentWorkers(agent)
        self.round = AgentRound(agent, self.workers)
        self.ending = AgentEnding(agent, self.workers)


def is_succeeded(result: RunResult) -> bool:
    return result.state == WorkerState.SUCCEEDED


def is_failed(result: RunResult) -> bool:
    return result.state in {WorkerState.UNHEALTHY, WorkerState.FAILED}


def is_healthy(result: RunResult) -> bool:
    return result.state == WorkerState.HEALTHY


def agent_class_with_loop(loop: Callable[[AgentParts], RunResult]) -> type:
    """A ``LocalElasticAgent`` subclass whose run loop is ``loop`` (given the agent's parts)."""

    def _invoke_run(agent: Any, role: str = "default") -> RunResult:
        return loop(AgentParts(agent))

    return type("LoopedElasticAgent", (LocalElasticAgent,), {"_invoke_run": _invoke_run})


@contextlib.contextmanager
def launcher_agent_with_loop(loop: Callable[[AgentParts], RunResult]) -> Iterator[None]:
    """For the block, torch's launcher builds agents that run ``loop`` instead of torch's run loop."""
    require(SYMBOLS)
    with patched(launcher_api, LocalElasticAgent=agent_class_with_loop(loop)):
        yield
