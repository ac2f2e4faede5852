"""Soft restarts: a failed worker's node restarts alone while the other nodes keep their processes.

Locally (CPU, gloo, one "pod" of 2 workers). The failed node is the only one here, so both its
workers restart and, with no survivor holding the model, start over; with two pods or more, the
other pods' workers keep their processes and the restarted ones catch up from them:

    pyflyte run examples/soft_restart.py soft_restart_wf                # trains
    pyflyte run examples/soft_restart.py soft_restart_wf --fail_rank 1  # rank 1 fails once: healed

On a cluster set ``EXAMPLE_NNODES`` to the job's pods, a number or a range (e.g. ``1:4``: go on with
at least 1 while a failed one restarts; a number ``N`` keeps all N). The loop is the pattern of
``flytekitplugins_rootcause.soft_restart``; what a survivor must hold, and what NCCL needs, is in
docs/soft_restarts.md.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
from flytekit import task, workflow
from flytekit.exceptions.user import FlyteRecoverableException

from flytekitplugins_rootcause import ElasticRootCause, soft_restart

#: The job's pods (``EXAMPLE_NNODES``): a number, or ``min:max`` as ``Elastic``'s ``nnodes``. Soft
#: restarts need ``nnodes`` as a range, so a number ``N`` is the range ``N:N`` (exactly N pods).
_NNODES = os.environ.get("EXAMPLE_NNODES", "1")
NNODES: str = f"{_NNODES}:{_NNODES}" if _NNODES.isdigit() else _NNODES


@task(task_config=ElasticRootCause(nnodes=NNODES, nproc_per_node=2, max_restarts=1, restart_policy="soft"),
      enable_deck=True)
def train(steps: int = 200, fail_rank: int = -1, fail_step: int = 50) -> float:
    """Fit y = 3x data-parallel; ``fail_rank`` raises a recoverable error once, at ``fail_step``."""

    def sync(model: torch.nn.Module, step: int) -> int:
        """After a world change every rank takes the model and step of the lowest rank that got furthest
        (a restarted worker starts at step 0; survivors may be one step apart). Defined here so that
        the task function ships to spawned workers whole, with no import of this file."""
        latest = torch.tensor([step])
        dist.all_reduce(latest, op=dist.ReduceOp.MAX)
        holder = torch.tensor([dist.get_rank() if step == int(latest) else dist.get_world_size()])
        dist.all_reduce(holder, op=dist.ReduceOp.MIN)
        for parameter in model.parameters():
            dist.broadcast(parameter.data, src=int(holder))
        return int(latest)

    def enter_world(model: torch.nn.Module, step: int) -> tuple[soft_restart.WorkerInfo, int]:
        """The next world, caught up. Its catch-up runs collectives too, and the world may change again
        under them (a peer fails, or a pod joins right after): then it is the next world's turn."""
        while True:
            info = soft_restart.reinitialize()
            try:
                return info, sync(model, step)
            except Exception as error:
                if not soft_restart.is_peer_failure(error):
                    raise

    torch.manual_seed(0)
    model = torch.nn.Linear(1, 1)  # initialisation (model load) happens once per process, before a world
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    info, step = enter_world(model, 0)
    loss = torch.tensor(0.0)
    while step < steps:
        if soft_restart.world_changed():  # a node is joining: leave the world at a step boundary
            info, step = enter_world(model, step)
            continue
        # once, in the job's first world: after it, another worker may hold that rank at that step
        if info.rank == fail_rank and step == fail_step and info.world_version == 0:
            raise FlyteRecoverableException(f"spot node reclaimed under rank {info.rank} at step {step}")
        x = torch.rand(32, 1)
        loss = torch.nn.functional.mse_loss(model(x), 3 * x)
        optimizer.zero_grad()
        loss.backward()
        try:
            for parameter in model.parameters():
                dist.all_reduce(parameter.grad)
                parameter.grad /= info.world_size
        except Exception as error:  # gloo raises a plain RuntimeError, NCCL a DistBackendError
            if not soft_restart.is_peer_failure(error):
                raise  # this worker's own error
            info, step = enter_world(model, step)  # a peer failed: wait for the next world and catch up
            continue
        optimizer.step()
        step += 1
    dist.destroy_process_group()
    return loss.item()


@workflow
def soft_restart_wf(steps: int = 200, fail_rank: int = -1, fail_step: int = 50) -> float:
    return train(steps=steps, fail_rank=fail_rank, fail_step=fail_step)
