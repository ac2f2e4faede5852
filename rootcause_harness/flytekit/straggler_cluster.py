"""Simulate a multi-node job on one machine: one torch elastic agent process per simulated node.

Used by the integration tests and ``benchmarks/straggler.py`` (and handy to try the check locally).
Each agent is a real subprocess calling ``elastic_launch`` with c10d rendezvous on 127.0.0.1, its
worker(s) real processes (forked from the agent by default) with gloo. A node is made slow from outside the check: the
harness hands the check a trial runner (``slow_device``) that makes each of that node's compute
trials cost more, as on a slower CPU; the check's measurement is the same as in production.

Each worker runs ``schedule`` checks in a row (entry ``i`` maps pod index -> slowdown factor for the
i-th check), writes every report as JSON, then runs a stand-in "user function" that records that it
ran (and in which world size), so tests can tell whether training would have started.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pickle
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rootcause_engine.straggler.measure import TrialRunner, run_trial
from rootcause_engine.straggler.report import StragglerReport, report_from_dict
from rootcause_engine.straggler.settings import StragglerCheck
from rootcause_harness.loopback import free_port


@dataclass(frozen=True)
class SimulatedCluster:
    """What to launch: ``nodes`` agents, each ``nproc_per_node`` workers, running ``check``."""

    nodes: int
    check: StragglerCheck
    schedule: tuple[Mapping[int, float], ...] = ({},)
    nnodes: str | None = None  # default: fixed at ``nodes``
    max_restarts: int = 0
    nproc_per_node: int = 1
    last_call_timeout_s: int = 1
    #: CPUs every simulated node (agent and workers) runs on; None: wherever the scheduler puts it.
    #: One CPU gives every node the same hardware: on a shared VM two vCPUs can compute at speeds
    #: 1.4x apart for seconds at a time (the host's other work), so nodes on different vCPUs are not
    #: equal nodes, and a check that calls one of them slow is right about it.
    cpus: frozenset[int] | None = None
    #: How each agent starts its workers. ``fork`` by default: a forked worker starts with the torch
    #: its agent already imported, so a simulated node costs one interpreter start instead of two
    #: (seconds of CPU each); the check measures the same either way. ``spawn`` is what a
    #: ``StragglerPrecheck`` or ``ElasticRootCause`` task uses unless its config says otherwise.
    start_method: str = "fork"


@dataclass
class AgentOutcome:
    """One simulated node after its agent exited."""

    index: int
    pod: str
    returncode: int
    reports: list[StragglerReport]
    trained_world_sizes: list[int]
    log: str


#: Exit code of a simulated agent stopped by a signal (an excluded straggler leaving the job).
LEFT_EXIT_CODE = 3


def slow_device(factor: float) -> TrialRunner:
    """A trial runner for a simulated CPU ``factor`` times slower than this machine's.

    All simulated nodes share this machine's cores, so no node can be given slower hardware. The
    runner runs the real trial, then keeps the CPU busy until the trial has cost ``factor`` times
    the CPU time it took: what the same work costs on a CPU that much slower, which is what the
    check times on CPU (``measure.trial_clock``). The extra work also competes for the cores like
    real work does.
    """
    if not factor >= 1.0:
        raise ValueError(f"a simulated slowdown factor must be >= 1, got {factor!r}")
    if factor == 1.0:
        return run_trial

    def run(trial: Callable[[], None]) -> None:
        started = time.process_time()
        trial()
        until = started + factor * (time.process_time() - started)
        while time.process_time() < until:
            pass

    return run


def pod_name_of(index: int) -> str:
    return f"sim-node-{index}"


def run_cluster(cluster: SimulatedCluster, workdir: Path, timeout_s: float = 240.0) -> list[AgentOutcome]:
    """Launch every agent, wait for all of them (killing them at ``timeout_s``), collect the outcomes."""
    workdir.mkdir(parents=True, exist_ok=True)
    spec_path = workdir / "cluster.pkl"
    spec_path.write_bytes(pickle.dumps(cluster))
    port, run_id = free_port(), f"sim-{os.getpid()}-{time.monotonic_ns()}"
    procs = []
    for index in range(cluster.nodes):
        env = {
            **os.environ,
            "FLYTE_INTERNAL_WORKER_NAME": pod_name_of(index),
            "PET_RDZV_ENDPOINT": f"127.0.0.1:{port}",  # as the PyTorchJob operator sets it on every pod
            "OMP_NUM_THREADS": "1",
            "PYTHONUNBUFFERED": "1",
        }
        log = open(workdir / f"agent-{index}.log", "wb")  # noqa: SIM115 - closed below
        cmd = [sys.executable, "-m", __name__, str(spec_path), str(index), str(port), run_id, str(workdir)]
        procs.append((subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT), log))
    deadline = time.monotonic() + timeout_s
    outcomes = []
    for index, (proc, log) in enumerate(procs):
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        outcomes.append(_outcome(index, proc.returncode, workdir))
    return outcomes


def _outcome(index: int, returncode: int, workdir: Path) -> AgentOutcome:
    pod = pod_name_of(index)
    reports = [report_from_dict(json.loads(p.read_text())) for p in sorted(workdir.glob(f"report-{pod}-rank*-*.json"))]
    trained = [int(p.read_text()) for p in sorted(workdir.glob(f"trained-{pod}-*"))]
    log = (workdir / f"agent-{index}.log").read_text(errors="replace")
    return AgentOutcome(index, pod, returncode, reports, trained, log)


def _worker(cluster: SimulatedCluster, index: int, workdir: str) -> int:
    """Runs in each spawned worker: the checks of the schedule, then the stand-in user function."""
    from flytekitplugins_rootcause.straggler.worker import run_straggler_check_in_worker

    pod, rank = pod_name_of(index), os.environ["RANK"]
    _say(f"worker rank {rank} of {pod} started")
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    for i, slowdowns in enumerate(cluster.schedule):
        runner = slow_device(slowdowns.get(index, 1.0))
        report = run_straggler_check_in_worker(cluster.check, nnodes=cluster.nnodes or cluster.nodes, runner=runner)
        out = Path(workdir) / f"report-{pod}-rank{rank}-a{attempt}-{i:04d}.json"
        out.write_text(json.dumps(dataclasses.asdict(report)))
    _say(f"worker rank {rank} of {pod}: checks done, user function starts")
    _user_function(Path(workdir) / f"trained-{pod}-rank{rank}-a{attempt}")
    _say(f"worker rank {rank} of {pod}: user function done")
    return int(os.environ["WORLD_SIZE"])


def _user_function(marker: Path) -> None:
    """Stand-in for the user's training function: its own init_process_group (which must work after
    the check), one all-reduce over the whole job, then a marker saying it ran, in which world size."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    try:
        total = torch.ones(1)
        dist.all_reduce(total)
        if int(total.item()) != dist.get_world_size():
            raise RuntimeError(f"all-reduce gave {total.item()}, expected {dist.get_world_size()}")
    finally:
        dist.destroy_process_group()
    marker.write_text(os.environ["WORLD_SIZE"])


def _say(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')}.{int(time.time() * 1000) % 1000:03d} [simulate] {message}", flush=True)


def _agent_main(spec_path: str, index: int, port: int, run_id: str, workdir: str) -> int:
    _say(f"agent {index} started")
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    from rootcause_engine.agent.store_keeper import stores_kept

    cluster: SimulatedCluster = pickle.loads(Path(spec_path).read_bytes())
    if cluster.cpus is not None:
        os.sched_setaffinity(0, cluster.cpus)  # before torch starts a thread or a worker: all inherit it
    endpoint = f"127.0.0.1:{port}"
    nnodes = cluster.nnodes or str(cluster.nodes)
    low, _, high = nnodes.partition(":")
    from torch.distributed.elastic.multiprocessing.api import SignalException

    # agent 0 hosts the rendezvous store (as worker 0 does in a PyTorchJob), not whichever agent binds
    # the port first: the others say is_host=False, and agent 0 either keeps it in a keeper process
    # (forked workers) or says is_host=True
    with stores_kept(cluster.start_method, "c10d", endpoint if index == 0 else None, {"read_timeout": 120}) as kept:
        config = LaunchConfig(
            min_nodes=int(low),
            max_nodes=int(high or low),
            nproc_per_node=cluster.nproc_per_node,
            run_id=run_id,
            rdzv_backend="c10d",
            rdzv_endpoint=endpoint,
            rdzv_configs={
                "join_timeout": 120,
                "last_call_timeout": cluster.last_call_timeout_s,
                "read_timeout": 120,
                "is_host": index == 0 and (kept is None or kept.rendezvous is None),
            },
            max_restarts=cluster.max_restarts,
            monitor_interval=0.2,
            start_method=cluster.start_method,
        )
        try:
            elastic_launch(config, _worker)(cluster, index, workdir)
        except SignalException as exc:  # what kfpytorch turns into IgnoreOutputs: this pod left the job
            _say(f"agent {index} stopped by {exc.sigval.name}: left the job")
            return LEFT_EXIT_CODE
    _say(f"agent {index} done")
    return 0


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="one simulated node's torch elastic agent")
    parser.add_argument("spec")
    parser.add_argument("index", type=int)
    parser.add_argument("port", type=int)
    parser.add_argument("run_id")
    parser.add_argument("workdir")
    return parser.parse_args(argv)


if __name__ == "__main__":
    args = _parse(sys.argv[1:])
    sys.exit(_agent_main(args.spec, args.index, args.port, args.run_id, args.workdir))
