"""A data-parallel training task with ElasticRootCause on Flyte 2.

On a cluster: ``ROOTCAUSE_REGISTRY=<registry> EXAMPLE_NNODES=2 flyte run examples/flyte2_training.py
train --fail_rank 1 --fault oom_kill``. With ``ROOTCAUSE_REGISTRY`` set, Flyte 2 builds the task image
and pushes it there: Flyte 2's Debian base with torch and ``flyteplugins-rootcause`` installed with
pip (which puts ``rootcause-a0``, the command the task's pods run, on PATH), or, with
``ROOTCAUSE_FROM_CHECKOUT=1``, the repository's ``Dockerfile`` (both flavours built from this
checkout; run from the repository root). Without a registry the environment takes Flyte 2's default
image, which lacks this plugin. The action's error then names the failed rank and its pod, the same
on every pod, and the report's "Failure timeline" tab shows the failures. ``EXAMPLE_NNODES`` is a
number of pods (``2``) or a range (``1:4``), as ``Elastic``'s ``nnodes``.

Locally, ``flyte run --local`` calls the function once, without torch elastic (Flyte 2's local
mode), so it never fails the way a job does; the real launch runs through ``rootcause-a0`` with local
folders (``rootcause-demo-flyte2``, and ``tests/test_examples.py`` runs this task as a 2-pod job).
NCCL is used automatically where CUDA is present.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import flyte
import flyte.errors
import torch
import torch.distributed as dist

from flyteplugins.rootcause import ElasticRootCause
from rootcause_engine.distributed import default_backend, default_device

#: The job's pods (``EXAMPLE_NNODES``): a number, or ``min:max`` as ``Elastic``'s ``nnodes``.
_NNODES = os.environ.get("EXAMPLE_NNODES", "1")
NNODES: int | str = int(_NNODES) if _NNODES.isdigit() else _NNODES
#: The torch pin of the image (the Dockerfile's ``ARG TORCH_VERSION``), and an extra index for it
#: (e.g. https://download.pytorch.org/whl/cpu; unset: PyPI's wheel, with CUDA).
TORCH_VERSION = os.environ.get("TORCH_VERSION", "2.13.0")
TORCH_INDEX = os.environ.get("TORCH_INDEX")
#: The repository's task image, which Flyte 2 builds from a checkout when asked to.
DOCKERFILE = Path(__file__).resolve().parents[1] / "Dockerfile"


def task_image() -> flyte.Image | str:
    """The image for the example's task when ``ROOTCAUSE_REGISTRY`` names where to push it: the
    plugin installed with pip on Flyte 2's Debian base, or the repository's ``Dockerfile`` with
    ``ROOTCAUSE_FROM_CHECKOUT=1``; else ``"auto"`` (Flyte 2's default image, for local runs)."""
    registry = os.environ.get("ROOTCAUSE_REGISTRY")
    if not registry:
        return "auto"
    if os.environ.get("ROOTCAUSE_FROM_CHECKOUT") == "1":
        return flyte.Image.from_dockerfile(DOCKERFILE, registry=registry, name="flytekitplugins-rootcause")
    return flyte.Image.from_debian_base(
        python_version=(3, 11), registry=registry, name="flyteplugins-rootcause"
    ).with_pip_packages(f"torch=={TORCH_VERSION}", "flyteplugins-rootcause", extra_index_urls=TORCH_INDEX)


env = flyte.TaskEnvironment(
    name="rootcause_training",
    plugin_config=ElasticRootCause(nnodes=NNODES, nproc_per_node=2),
    image=task_image(),
)


@env.task(report=True)
def train(steps: int = 40, fail_rank: int = -1, fault: str = "raise") -> float:
    """A small classifier trained with DDP on synthetic data; returns rank 0's accuracy over every rank's
    last batch. ``fail_rank`` fails at step 10: ``"raise"`` (a plain error: Flyte 2 retries the task),
    ``"bad_data"`` (``flyte.errors.NonRecoverableError``: no retry), ``"oom_kill"`` (SIGKILL, as the
    kernel's OOM killer ends a worker)."""
    dist.init_process_group(default_backend())
    rank = dist.get_rank()
    device = default_device(int(os.environ["LOCAL_RANK"]))
    torch.manual_seed(0)  # one model on every rank; each draws its own data below
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)).to(device)
    model = torch.nn.parallel.DistributedDataParallel(net, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    data = torch.Generator().manual_seed(1000 + rank)
    correct = torch.zeros(2, device=device)  # right answers, batch size
    for step in range(steps):
        if step == 10 and rank == fail_rank:
            if fault == "oom_kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if fault == "bad_data":
                raise flyte.errors.NonRecoverableError(f"rank {rank}: shard 17 fails its checksum")
            raise RuntimeError(f"rank {rank}: reading shard 17 timed out")
        features = torch.randn(64, 8, generator=data).to(device)
        labels = (features[:, 0] + features[:, 1] > 0).long()
        logits = model(features)
        loss = torch.nn.functional.cross_entropy(logits, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        hits = (logits.argmax(1) == labels).float().detach()
        correct = torch.stack([hits.sum(), torch.tensor(float(hits.numel()), device=device)])
    dist.all_reduce(correct)
    dist.destroy_process_group()
    return float(correct[0] / correct[1])
