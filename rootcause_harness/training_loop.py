"""The training the simulated jobs run: a gloo all-reduce loop with an injectable fault.

Flyte-free, so both flavours' simulated jobs (flytekit's ``rootcause_harness.flytekit``,
Flyte 2's ``rootcause_harness.flyte2``) run the same steps in their tasks' workers.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from rootcause_core.worker_names import current_worker_name
from rootcause_harness.faults import (
    BEFORE_INIT,
    FAULT_VARIABLE,
    SIM_DIR_VARIABLE,
    Communication,
    Fault,
    maybe_inject,
)

#: gloo collectives give up after this long (a hung peer then surfaces as a timeout error).
COLLECTIVE_TIMEOUT_S = 20
#: The collective timeout of the hung-rank tasks: short, so a hang surfaces in seconds.
SHORT_COLLECTIVE_TIMEOUT_S = 3
#: The collective timeout users run (gloo's default, and what large NCCL jobs set so that a checkpoint
#: or a rank-0 evaluation never trips it): a hang surfaces only through the hang watch.
LONG_COLLECTIVE_TIMEOUT_S = 1800
#: How long the test-only tasks' workers wait for each other to form the default group (they fork,
#: so they reach it within moments of each other): short, so a rank that never comes surfaces fast.
SHORT_INIT_TIMEOUT_S = 15
RANKS_DIR = "ranks"


def _record_placement(rank: int, pod: str, local_rank: int) -> None:
    """Ground truth for the simulator: which pod and local rank got which global rank."""
    sim_dir = os.environ.get(SIM_DIR_VARIABLE)
    if sim_dir:
        path = Path(sim_dir) / RANKS_DIR
        path.mkdir(parents=True, exist_ok=True)
        (path / str(rank)).write_text(f"{pod}\n{local_rank}")


def run_training(
    steps: int, collective_timeout_s: float = COLLECTIVE_TIMEOUT_S, init_timeout_s: float = COLLECTIVE_TIMEOUT_S
) -> float:
    """A few data-parallel steps: a small matmul and an all-reduce of the 'gradients'.

    Set-up (the default group, the first barrier) waits up to ``init_timeout_s`` for the slowest
    worker to start, whatever ``collective_timeout_s`` is: on a busy machine spawned workers start
    seconds apart. A shorter ``collective_timeout_s`` applies to the training all-reduces only, in
    a group of their own (the Flight Recorder numbers its collectives from 1).
    """
    # the agent gave each worker its rank: the placement is known before the group forms, and is
    # recorded then, so a worker that never reaches the group is placed too
    rank, pod, local_rank = int(os.environ["RANK"]), current_worker_name(), int(os.environ["LOCAL_RANK"])
    _record_placement(rank, pod, local_rank)
    maybe_inject(BEFORE_INIT, pod, local_rank)
    dist.init_process_group("gloo", timeout=timedelta(seconds=init_timeout_s))
    dist.barrier()
    group = None
    if collective_timeout_s != init_timeout_s:
        group = dist.new_group(timeout=timedelta(seconds=collective_timeout_s))
    fault = Fault.from_env(os.environ.get(FAULT_VARIABLE))
    communication = Communication(fault.communication) if fault is not None else Communication.ALL_REDUCE
    source = _broadcast_source(communication, fault, pod, local_rank)
    weights = torch.ones(64, 64)
    loss = 0.0
    for step in range(steps):
        maybe_inject(step, pod, local_rank)
        grads = weights @ torch.randn(64, 64) * 1e-3
        grads = exchange(communication, grads, group, source)
        weights -= grads / dist.get_world_size()
        loss = float(weights.mean())
        time.sleep(0.05)
    dist.destroy_process_group()
    return loss


def _broadcast_source(communication: Communication, fault: Fault | None, pod: str, local_rank: int) -> int:
    """The global rank a broadcast step sends from: the faulty worker (its root hangs), or the same
    local rank of the next pod (a receiver hangs). Ranks are the rendezvous's, so the workers learn
    which rank is the faulty one with one all-reduce first (before any fault is due)."""
    if fault is None or communication not in (Communication.BROADCAST_ROOT, Communication.BROADCAST_RECEIVER):
        return 0
    faulty_flags, rank = torch.zeros(dist.get_world_size()), dist.get_rank()
    faulty_flags[rank] = float((pod, local_rank) == (fault.pod, fault.local_rank))
    dist.all_reduce(faulty_flags)
    faulty = int(faulty_flags.argmax())
    if communication == Communication.BROADCAST_ROOT:
        return faulty
    return (faulty + int(os.environ.get("LOCAL_WORLD_SIZE", "1"))) % dist.get_world_size()


def exchange(
    communication: Communication, grads: torch.Tensor, group: dist.ProcessGroup | None, source: int
) -> torch.Tensor:
    """One step's exchange of ``grads`` with every other rank, by ``communication``; the summed (or
    received) result."""
    world, rank = dist.get_world_size(), dist.get_rank()
    if communication == Communication.ALL_REDUCE:
        dist.all_reduce(grads, group=group)
    elif communication in (Communication.BROADCAST_ROOT, Communication.BROADCAST_RECEIVER):
        dist.broadcast(grads, src=source, group=group)
    elif communication == Communication.BARRIER:
        dist.barrier(group=group)
    elif communication == Communication.ALL_GATHER:
        gathered = [torch.empty_like(grads) for _ in range(world)]
        dist.all_gather(gathered, grads, group=group)
        grads = torch.stack(gathered).sum(0)
    elif communication == Communication.REDUCE_SCATTER:
        shard = torch.empty(grads.shape[0] // world or 1, grads.shape[1])
        dist.reduce_scatter_tensor(shard, grads[: shard.shape[0] * world].contiguous(), group=group)
        grads = shard.repeat(world, 1)[: grads.shape[0]]
    elif communication == Communication.SEND_RECV:  # even ranks send first, odd ones receive first
        received = torch.empty_like(grads)
        for call in ("send", "recv") if rank % 2 == 0 else ("recv", "send"):
            if call == "send":
                dist.send(grads, (rank + 1) % world, group=group)
            else:
                dist.recv(received, (rank - 1) % world, group=group)
        grads = received
    return grads
