"""The collective check every worker runs: rendezvous once, benchmark in groups, decide on rank 0.

Every worker calls ``run_check`` at the same point. Rank 0 alone computes the later rounds' groups
and the verdicts and broadcasts them, so all workers act on the very same decision even if their
clocks or floating-point sums differed.
"""

from __future__ import annotations

import os
import pickle
import socket
import time
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from rootcause_core.worker_names import current_worker_name
from rootcause_engine.agent.rendezvous_host import agent_hosts_store
from rootcause_engine.straggler import grouping
from rootcause_engine.straggler.decision import decide
from rootcause_engine.straggler.measure import (
    DeviceChoice,
    StepTimeout,
    TrialRunner,
    choose_device,
    measure_comm,
    measure_compute,
    run_trial,
)
from rootcause_engine.straggler.procgroup import check_process_group, require_elastic_env
from rootcause_engine.straggler.report import StragglerReport, build_nodes
from rootcause_engine.straggler.samples import (
    WorkerIdentity,
    WorkerSample,
    aggregate,
    ranks_by_node,
    round_times,
)
from rootcause_engine.straggler.settings import StragglerCheck, StragglerCheckError, Workload


def current_identity() -> WorkerIdentity:
    require_elastic_env()
    return WorkerIdentity(
        rank=int(os.environ["RANK"]),
        local_rank=int(os.environ["LOCAL_RANK"]),
        node_rank=int(os.environ["GROUP_RANK"]),
        pod=current_worker_name(),
        host=socket.gethostname(),
        hosts_rendezvous=agent_hosts_store(),
    )


def _to_tensor(obj: Any, device: torch.device) -> torch.Tensor:
    return torch.tensor(list(pickle.dumps(obj)), dtype=torch.uint8, device=device)


def _from_tensor(tensor: torch.Tensor, size: int) -> Any:
    return pickle.loads(bytes(tensor[:size].tolist()))


def _all_gather(obj: Any, device: torch.device) -> list[Any]:
    """``all_gather_object`` without numpy (torch's needs it; this image has none). Small objects only."""
    data = _to_tensor(obj, device)
    sizes = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, torch.tensor([data.numel()], dtype=torch.int64, device=device))
    longest = max(int(s.item()) for s in sizes)
    padded = torch.zeros(longest, dtype=torch.uint8, device=device)
    padded[: data.numel()] = data
    out = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(out, padded)
    return [_from_tensor(t.cpu(), int(s.item())) for t, s in zip(out, sizes, strict=True)]


def _broadcast(obj: Any, device: torch.device) -> Any:
    """Rank 0's ``obj`` on every rank (``broadcast_object_list`` without numpy)."""
    data = _to_tensor(obj, device) if dist.get_rank() == 0 else None
    size = torch.tensor([0 if data is None else data.numel()], dtype=torch.int64, device=device)
    dist.broadcast(size, src=0)
    if data is None:
        data = torch.empty(int(size.item()), dtype=torch.uint8, device=device)
    dist.broadcast(data, src=0)
    return _from_tensor(data.cpu(), int(size.item()))


def run_check(check: StragglerCheck, runner: TrialRunner = run_trial) -> StragglerReport:
    """Run the check on every worker of the job (a collective call); returns the same report everywhere.

    ``runner`` runs each compute trial of this worker (see ``measure.TrialRunner``).
    """
    started = time.perf_counter()
    ident = current_identity()
    choice = choose_device(ident.local_rank)
    workload = check.workload_for(choice.device.type)
    try:
        with check_process_group(choice.backend, check.timeout_s):
            identities: list[WorkerIdentity] = _all_gather(ident, choice.device)
            report = _rounds(check, workload, choice, ident, identities, started, runner)
            report = _broadcast(report if dist.get_rank() == 0 else None, choice.device)
    except (RuntimeError, dist.DistError) as exc:  # a peer died or hung: say where and what to do
        raise StragglerCheckError(
            f"the straggler check could not complete on pod {ident.pod!r} (rank {ident.rank}, node rank "
            f"{ident.node_rank}): {type(exc).__name__}: {exc}. Another node probably died or hung during the "
            f"check (bounded by StragglerCheck(timeout_s={check.timeout_s:g})); see that pod's log."
        ) from exc
    return report


def _rounds(
    check: StragglerCheck,
    workload: Workload,
    choice: DeviceChoice,
    ident: WorkerIdentity,
    identities: list[WorkerIdentity],
    started: float,
    runner: TrialRunner,
) -> StragglerReport | None:
    report = StragglerReport(
        threshold=check.threshold,
        network_threshold=check.network_threshold,
        min_excess_s=check.min_excess_s,
        rounds=check.rounds,
        action=check.action.value,
        device=choice.device.type,
        backend=choice.backend,
        dtype=choice.dtype_name,
        matmul_size=workload.matmul_size,
        allreduce_numel=workload.allreduce_numel,
    )
    nodes = ranks_by_node(identities)
    node_ranks = sorted(nodes)
    if len(node_ranks) < check.min_nodes:
        report.skipped = f"{len(node_ranks)} node(s), the check needs at least min_nodes={check.min_nodes}"
        report.wall_time_s = time.perf_counter() - started
        return report
    index_of = {node: i for i, node in enumerate(node_ranks)}
    groups = [tuple(node_ranks[i] for i in g) for g in grouping.first_round_groups(len(node_ranks))]
    history: list[list[tuple[int, ...]]] = []
    samples: list[WorkerSample] = []
    step_budget_s = check.timeout_s / (2 * check.rounds)
    for round_index in range(check.rounds):
        if round_index:
            if dist.get_rank() == 0:
                times = round_times(aggregate(node_ranks, samples, history), round_index - 1)
                by_index = {index_of[n]: t for n, t in times.items()}
                past = [[tuple(index_of[n] for n in g) for g in rnd] for rnd in history]
                new = grouping.next_round_groups(by_index, past)
                groups = [tuple(node_ranks[i] for i in g) for g in new]
            groups = _broadcast(groups if dist.get_rank() == 0 else None, choice.device)
        history.append(groups)
        rank_groups = [[r for node in g for r in nodes[node]] for g in groups]
        sample = _measure_round(
            workload, choice, ident, round_index, rank_groups, check.timeout_s, step_budget_s, runner
        )
        samples.extend(_all_gather(sample, choice.device))
    if dist.get_rank() != 0:
        return None
    times = aggregate(node_ranks, samples, history)
    decision = decide(times, check.threshold, check.min_excess_s, check.network_threshold)
    report.nodes = build_nodes(identities, times, decision.nodes, history)
    report.compute_threshold_applied = decision.compute_threshold
    report.network_threshold_applied = decision.network_threshold
    report.round_groups = [[list(g) for g in rnd] for rnd in history]
    report.network_localizable = grouping.network_localizable(history)
    report.wall_time_s = time.perf_counter() - started
    return report


def _measure_round(
    workload: Workload,
    choice: DeviceChoice,
    ident: WorkerIdentity,
    round_index: int,
    rank_groups: list[list[int]],
    timeout_s: float,
    step_budget_s: float,
    runner: TrialRunner,
) -> WorkerSample:
    """Compute (all nodes at once, as in training), then communication within this worker's group."""
    group, _ = dist.new_subgroups_by_enumeration(
        rank_groups, timeout=timedelta(seconds=timeout_s), backend=choice.backend
    )
    compute_s = comm_s = None
    errors = []
    try:
        dist.barrier()
        try:
            compute_s = measure_compute(workload, choice, step_budget_s, dist.barrier, runner)
        except StepTimeout as exc:
            errors.append(str(exc))
        except Exception as exc:  # a broken device is a verdict ("failed"), not a crash of the check
            errors.append(f"compute step raised {type(exc).__name__}: {exc}")
        dist.barrier()  # nobody's links are measured while another node still computes
        try:
            comm_s = measure_comm(workload, choice, group)
        except Exception as exc:  # a broken link likewise
            errors.append(f"communication step raised {type(exc).__name__}: {exc}")
    finally:
        dist.destroy_process_group(group)
    return WorkerSample(ident.rank, ident.node_rank, round_index, compute_s, comm_s, "; ".join(errors))
