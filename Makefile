# The README's two commands. Each creates .venv if missing, installs torch==2.13.0 first
# (a bare `torch` requirement would pull gigabytes of CUDA wheels), then the reader's and the engine's
# distributions (the plugin requires both), then the flytekit plugin, then Flyte 2 (flyte and
# flyteplugins-pytorch, pinned: they install beside flytekit without conflicts), the Flyte 2 plugin, and the
# development harness (the simulated jobs and both demos).
VENV ?= .venv
PYTHON ?= python3.11
PY := $(VENV)/bin/python
STAMP := $(VENV)/.rootcause-installed

.PHONY: demo test lint venv clean

venv: $(STAMP)

$(STAMP): setup.cfg pyproject.toml distributions/backend-reader/pyproject.toml distributions/rootcause-engine/pyproject.toml \
		distributions/flyteplugins-rootcause/pyproject.toml distributions/rootcause-harness/pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e distributions/backend-reader
	$(PY) -m pip install -q -e distributions/rootcause-engine
	$(PY) -m pip install -q -e '.[test]'
	$(PY) -m pip install -q flyte==2.12.1 flyteplugins-pytorch==2.12.1
	$(PY) -m pip install -q -e distributions/flyteplugins-rootcause
	# the development harness (simulated PyTorchJobs, faults, the demos): never in a task image
	$(PY) -m pip install -q -e distributions/rootcause-harness
	# build back-ends for the task image's offline replay (tests/test_task_image.py)
	$(PY) -m pip download -q -d $(VENV)/wheelhouse 'setuptools>=77' wheel
	@touch $@

demo: $(STAMP)
	$(VENV)/bin/rootcause-demo

# two pytest workers: most tests wait on real processes and servers, so two run in the time of one
test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/pytest -n 2

lint: $(STAMP)
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) build *.egg-info
