# Task image for both flavours, Flyte 1 and Flyte 2, built from this repository's source: Python 3.11
# slim, torch, and this plugin's distributions. (Without a checkout, install the published packages
# instead: `flytekitplugins-rootcause` and `flyteplugins-rootcause`, as the README shows.)
# Flyte 1 (`pyflyte run --remote`): flytekit, kfpytorch and the patched entrypoint
# (`pyflyte-rootcause-execute`) on PATH; ElasticRootCause tasks name it in their container args.
# Flyte 2 (`flyte run`/`flyte deploy`): flyte, flyteplugins-pytorch and `flyteplugins.rootcause`;
# its tasks run `rootcause-a0` (flyte's runtime `a0`, the kubelet's SIGTERM noted first), which the
# Flyte 2 plugin's distribution puts on PATH (`examples/flyte2_training.py` builds this file with
# `flyte.Image.from_dockerfile`). The two install together without conflicts.
# For GPUs, start from a CUDA base image or install a CUDA torch wheel instead.
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    VENV=/opt/venv
RUN python -m venv "$VENV"
ENV PATH="$VENV/bin:$PATH"

# torch first, pinned, from the CPU index; swap the index for a CUDA build on GPU nodes.
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
RUN pip install "torch==${TORCH_VERSION}" --index-url "${TORCH_INDEX}"
# The default flytekit and flyte pins (the Makefile's): the distributions state lower bounds only.
ARG FLYTEKIT_VERSION=1.16.31
ARG FLYTE_VERSION=2.12.1
RUN pip install "flytekit==${FLYTEKIT_VERSION}" "flytekitplugins-kfpytorch==${FLYTEKIT_VERSION}" \
    "flyte==${FLYTE_VERSION}" "flyteplugins-pytorch==${FLYTE_VERSION}"

WORKDIR /root
COPY setup.cfg pyproject.toml VERSION LICENSE ./
COPY flytekitplugins_rootcause ./flytekitplugins_rootcause
COPY rootcause_core ./rootcause_core
COPY rootcause_engine ./rootcause_engine
COPY backend_reader ./backend_reader
COPY flyteplugins ./flyteplugins
COPY distributions ./distributions
RUN pip install ./distributions/rootcause-core ./distributions/backend-reader ./distributions/rootcause-engine . \
        ./distributions/flyteplugins-rootcause \
    && command -v pyflyte-rootcause-execute && command -v rootcause-reader && command -v rootcause-a0 \
    && python -c "import flyteplugins.rootcause, flyteplugins.pytorch"

# Your workflow code (pyflyte --remote uploads it with fast registration; copy it for a baked image).
COPY examples ./examples
