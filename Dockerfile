# Task image for both flavours, Flyte 1 and Flyte 2: Python 3.11 slim, torch, and this plugin's
# distributions. Flyte 1 (`pyflyte run --remote`): flytekit, kfpytorch and the patched entrypoint
# (`pyflyte-rootcause-execute`) on PATH; ElasticRootCause tasks name it in their container args.
# Flyte 2 (`flyte run`/`flyte deploy`): flyte, flyteplugins-pytorch and `flyteplugins.rootcause`;
# its tasks run `a0`, flyte's runtime (`examples/flyte2_training.py` builds this file with
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

WORKDIR /root
COPY setup.cfg pyproject.toml README.md ./
COPY flytekitplugins_rootcause ./flytekitplugins_rootcause
COPY rootcause_core ./rootcause_core
COPY rootcause_engine ./rootcause_engine
COPY backend_reader ./backend_reader
COPY docs/backend_reader.md ./docs/backend_reader.md
COPY flyteplugins ./flyteplugins
COPY distributions ./distributions
RUN pip install ./distributions/backend-reader ./distributions/rootcause-engine . ./distributions/flyteplugins-rootcause \
    && command -v pyflyte-rootcause-execute && command -v rootcause-reader \
    && python -c "import flyteplugins.rootcause, flyteplugins.pytorch"

# Your workflow code (pyflyte --remote uploads it with fast registration; copy it for a baked image).
COPY examples ./examples
