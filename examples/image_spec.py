"""The task image as a flytekit ``ImageSpec``: the same image as the repository's ``Dockerfile``.

For ``pyflyte run --remote`` users who never write a Dockerfile: flytekit builds and pushes the
image itself when a task names it. Run from the repository root (``ImageSpec.copy`` takes paths
relative to the folder ``pyflyte`` runs in), with a registry the cluster can pull from:

    ROOTCAUSE_REGISTRY=ghcr.io/<you> pyflyte run --remote examples/training_workflow.py training_wf

What goes in, as in the Dockerfile: torch pinned (``TORCH_VERSION``; PyPI's Linux wheel is the
CUDA build, so the image runs on GPU nodes; ``TORCH_INDEX`` picks another index, the CPU one for
CPU-only clusters), then the reader's and the engine's distributions and the plugin's two flavours,
built from the repository inside the image, which puts ``pyflyte-rootcause-execute`` (the
entrypoint ``ElasticRootCause`` and ``StragglerPrecheck`` tasks name in their container args),
``rootcause-reader`` and Flyte 2's ``a0`` on PATH.
``tests/test_task_image.py`` checks that it copies what the Dockerfile copies and that the
install it runs gives the same console scripts.
"""

from __future__ import annotations

import os

from flytekit import ImageSpec

#: The torch pin of the image (the Dockerfile's ``ARG TORCH_VERSION``).
TORCH_VERSION = os.environ.get("TORCH_VERSION", "2.13.0")
#: An extra package index for torch only, e.g. https://download.pytorch.org/whl/cpu (the
#: Dockerfile's ``ARG TORCH_INDEX``); unset: PyPI's wheel, with CUDA.
TORCH_INDEX = os.environ.get("TORCH_INDEX")

#: The repository paths the image builds the distributions from (the Dockerfile's COPY lines).
REPOSITORY_PATHS = [
    "setup.cfg",
    "pyproject.toml",
    "README.md",
    "rootcause_core",
    "rootcause_engine",
    "backend_reader",
    "docs/backend_reader.md",
    "flyteplugins",
    "distributions",
    "flytekitplugins_rootcause",
]

#: The install step, run in the image after the copies land under /root. ``uv`` is the installer
#: flytekit's image builder provides to commands; it installs into the image's Python.
INSTALL_COMMAND = (
    "uv pip install /root/distributions/backend-reader /root/distributions/rootcause-engine /root"
    " /root/distributions/flyteplugins-rootcause"
)


def rootcause_image(registry: str | None = None, name: str = "flytekitplugins-rootcause") -> ImageSpec:
    """An ``ImageSpec`` for tasks of this plugin (``@task(..., container_image=rootcause_image(...))``)."""
    return ImageSpec(
        name=name,
        registry=registry,
        python_version="3.11",
        packages=[
            f"torch=={TORCH_VERSION}",
            "flytekit>=1.16,<1.17",
            "flytekitplugins-kfpytorch>=1.16,<1.17",
        ],
        pip_extra_index_url=[TORCH_INDEX] if TORCH_INDEX else None,
        copy=list(REPOSITORY_PATHS),
        commands=[INSTALL_COMMAND],
    )


def image_from_environment() -> ImageSpec | None:
    """The image for the example tasks: built by flytekit when ``ROOTCAUSE_REGISTRY`` is set; else
    ``None`` (flytekit's default image: a local run, or ``pyflyte run --remote --image <yours>``)."""
    registry = os.environ.get("ROOTCAUSE_REGISTRY")
    return rootcause_image(registry) if registry else None
