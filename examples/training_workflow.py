"""A data-parallel training workflow with ElasticRootCause.

Locally (CPU, gloo, 2 workers in one "pod"):

    pyflyte run examples/training_workflow.py training_wf                    # trains
    pyflyte run examples/training_workflow.py training_wf --fail_rank 1      # rank 1 raises: see the report
    pyflyte run examples/training_workflow.py training_wf --fail_rank 0 --fault sigkill

On a cluster (see the README's "Run it on a cluster"): set nnodes to the number of pods, or a
range ``min:max`` (EXAMPLE_NNODES, as Elastic's nnodes), then either let flytekit build the image
(examples/image_spec.py: the plugin from the package index, or from this checkout with
ROOTCAUSE_FROM_CHECKOUT=1): `ROOTCAUSE_REGISTRY=<registry> pyflyte run --remote examples/training_workflow.py
training_wf`, or build it from the repository's Dockerfile and `pyflyte run --remote --image <image> ...`.
NCCL is used automatically where CUDA is present.
"""

from __future__ import annotations

import os
import signal

import torch
import torch.distributed as dist
from flytekit import task, workflow
from image_spec import image_from_environment

from flytekitplugins_rootcause import ElasticRootCause
from flytekitplugins_rootcause.distributed import default_backend, default_device

#: The job's pods (``EXAMPLE_NNODES``): a number, or ``min:max`` as ``Elastic``'s ``nnodes``.
_NNODES = os.environ.get("EXAMPLE_NNODES", "1")
NNODES: int | str = int(_NNODES) if _NNODES.isdigit() else _NNODES


@task(
    task_config=ElasticRootCause(nnodes=NNODES, nproc_per_node=2),
    enable_deck=True,
    container_image=image_from_environment(),
)
def train(epochs: int = 3, fail_rank: int = -1, fault: str = "raise") -> float:
    """Fit y = 3x with DDP; ``fail_rank`` injects a fault ("raise", "sigkill" or "sigabrt") in epoch 1."""
    dist.init_process_group(default_backend())
    rank, local_rank = dist.get_rank(), int(os.environ["LOCAL_RANK"])
    device = default_device(local_rank)
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Linear(1, 1).to(device), device_ids=[device.index] if device.type == "cuda" else None
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.manual_seed(rank)
    loss = torch.tensor(0.0)
    for epoch in range(epochs):
        if epoch == 1 and rank == fail_rank:
            if fault == "sigkill":
                os.kill(os.getpid(), signal.SIGKILL)
            if fault == "sigabrt":
                os.abort()
            raise ValueError(f"corrupt shard read by rank {rank} in epoch {epoch}")
        for _ in range(20):
            x = torch.rand(32, 1, device=device)
            loss = torch.nn.functional.mse_loss(model(x), 3 * x)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    dist.destroy_process_group()
    return float(loss)


@workflow
def training_wf(epochs: int = 3, fail_rank: int = -1, fault: str = "raise") -> float:
    return train(epochs=epochs, fail_rank=fail_rank, fault=fault)
