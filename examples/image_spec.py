"""The task image as a flytekit ``ImageSpec``, for ``pyflyte run --remote`` users who never write a Dockerfile.

flytekit builds and pushes the image itself when a task names it, with a registry the cluster can
pull from:

    ROOTCAUSE_REGISTRY=ghcr.io/<you> pyflyte run --remote examples/training_workflow.py training_wf

Two ways, one image:

- :func:`rootcause_image` (the default): the published distributions, installed with pip, as any
  flytekit plugin is: torch pinned (``TORCH_VERSION``; PyPI's Linux wheel is the CUDA build, so the
  image runs on GPU nodes; ``TORCH_INDEX`` picks another index, the CPU one for CPU-only clusters),
  then ``flytekitplugins-rootcause``, which brings the engine, the reader, flytekit and kfpytorch and
  puts ``pyflyte-rootcause-execute`` (the entrypoint ``ElasticRootCause`` and ``StragglerPrecheck``
  tasks name in their container args) and ``rootcause-reader`` on PATH. No checkout needed.
- :func:`rootcause_image_from_checkout` (``ROOTCAUSE_FROM_CHECKOUT=1``): the same as the
  repository's ``Dockerfile``, for a checkout's own code: the default pins (torch, flytekit, flyte),
  then every distribution built from the repository inside the image (the plugin's two flavours, so
  Flyte 2's ``rootcause-a0`` is on PATH too). Run it from the repository root (``ImageSpec.copy``
  takes paths relative to the folder ``pyflyte`` runs in). ``tests/test_task_image.py`` checks that
  it copies what the Dockerfile copies and that the install it runs gives the same console scripts.
"""

from __future__ import annotations

import os

from flytekit import ImageSpec

#: The torch pin of the image (the Dockerfile's ``ARG TORCH_VERSION``).
TORCH_VERSION = os.environ.get("TORCH_VERSION", "2.13.0")
#: An extra package index for torch only, e.g. https://download.pytorch.org/whl/cpu (the
#: Dockerfile's ``ARG TORCH_INDEX``); unset: PyPI's wheel, with CUDA.
TORCH_INDEX = os.environ.get("TORCH_INDEX")
#: The flytekit/kfpytorch and flyte/flyteplugins-pytorch pins of the image built from a checkout
#: (the Dockerfile's ``ARG FLYTEKIT_VERSION`` and ``ARG FLYTE_VERSION``).
FLYTEKIT_VERSION = os.environ.get("FLYTEKIT_VERSION", "1.16.31")
FLYTE_VERSION = os.environ.get("FLYTE_VERSION", "2.12.1")

#: The repository paths the image built from a checkout installs from (the Dockerfile's COPY lines).
REPOSITORY_PATHS = [
    "setup.cfg",
    "pyproject.toml",
    "VERSION",
    "LICENSE",
    "rootcause_core",
    "rootcause_engine",
    "backend_reader",
    "flyteplugins",
    "distributions",
    "flytekitplugins_rootcause",
]

#: The install step of the image built from a checkout, run after the copies land under /root.
#: ``uv`` is the installer flytekit's image builder provides to commands; it installs into the
#: image's Python.
INSTALL_COMMAND = (
    "uv pip install /root/distributions/rootcause-core /root/distributions/backend-reader"
    " /root/distributions/rootcause-engine /root /root/distributions/flyteplugins-rootcause"
)


def rootcause_image(registry: str | None = None, name: str = "flytekitplugins-rootcause") -> ImageSpec:
    """An ``ImageSpec`` for tasks of this plugin (``@task(..., container_image=rootcause_image(...))``),
    with the plugin installed from the package index."""
    return ImageSpec(
        name=name,
        registry=registry,
        python_version="3.11",
        packages=[f"torch=={TORCH_VERSION}", "flytekitplugins-rootcause"],
        pip_extra_index_url=[TORCH_INDEX] if TORCH_INDEX else None,
    )


def rootcause_image_from_checkout(registry: str | None = None, name: str = "flytekitplugins-rootcause") -> ImageSpec:
    """The same image with the plugin built from this repository (run from its root), as the
    ``Dockerfile`` builds it."""
    return ImageSpec(
        name=name,
        registry=registry,
        python_version="3.11",
        packages=[
            f"torch=={TORCH_VERSION}",
            f"flytekit=={FLYTEKIT_VERSION}",
            f"flytekitplugins-kfpytorch=={FLYTEKIT_VERSION}",
            f"flyte=={FLYTE_VERSION}",
            f"flyteplugins-pytorch=={FLYTE_VERSION}",
        ],
        pip_extra_index_url=[TORCH_INDEX] if TORCH_INDEX else None,
        copy=list(REPOSITORY_PATHS),
        commands=[INSTALL_COMMAND],
    )


def image_from_environment() -> ImageSpec | None:
    """The image for the example tasks: built by flytekit when ``ROOTCAUSE_REGISTRY`` is set, with the
    plugin from the package index, or from this checkout when ``ROOTCAUSE_FROM_CHECKOUT=1``; else
    ``None`` (flytekit's default image: a local run, or ``pyflyte run --remote --image <yours>``)."""
    registry = os.environ.get("ROOTCAUSE_REGISTRY")
    if not registry:
        return None
    if os.environ.get("ROOTCAUSE_FROM_CHECKOUT") == "1":
        return rootcause_image_from_checkout(registry)
    return rootcause_image(registry)
