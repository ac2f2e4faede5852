# The README's two commands. Each creates .venv if missing and installs the default pins first, for
# speed (the distributions state lower bounds only; a bare `torch` requirement would pull gigabytes
# of CUDA wheels): torch, then flytekit and kfpytorch. Then the shared core's distribution
# (rootcause-core), the reader's and the engine's (the plugin requires all three), the flytekit
# plugin, Flyte 2 (flyte and flyteplugins-pytorch, pinned: they install beside flytekit without
# conflicts), the Flyte 2 plugin, and the development harness (the simulated jobs and both demos).
# Another default: `make venv TORCH_VERSION=2.14.1` (the Dockerfile's ARGs hold the same defaults).
VENV ?= .venv
PYTHON ?= python3.11
TORCH_VERSION ?= 2.13.0
FLYTEKIT_VERSION ?= 1.16.31
FLYTE_VERSION ?= 2.12.1
PY := $(VENV)/bin/python
STAMP := $(VENV)/.rootcause-installed

.PHONY: demo test compat lint venv clean

venv: $(STAMP)

$(STAMP): setup.cfg pyproject.toml VERSION distributions/rootcause-core/pyproject.toml \
		distributions/backend-reader/pyproject.toml distributions/rootcause-engine/pyproject.toml \
		distributions/flyteplugins-rootcause/pyproject.toml distributions/rootcause-harness/pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==$(TORCH_VERSION)
	$(PY) -m pip install -q flytekit==$(FLYTEKIT_VERSION) flytekitplugins-kfpytorch==$(FLYTEKIT_VERSION)
	$(PY) -m pip install -q -e distributions/rootcause-core
	$(PY) -m pip install -q -e distributions/backend-reader
	$(PY) -m pip install -q -e distributions/rootcause-engine
	$(PY) -m pip install -q -e '.[test]'
	$(PY) -m pip install -q flyte==$(FLYTE_VERSION) flyteplugins-pytorch==$(FLYTE_VERSION)
	$(PY) -m pip install -q -e distributions/flyteplugins-rootcause
	# the development harness (simulated PyTorchJobs, faults, the demos): never in a task image
	$(PY) -m pip install -q -e distributions/rootcause-harness
	# build back-ends for the task image's offline replay (tests/test_task_image.py)
	$(PY) -m pip download -q -d $(VENV)/wheelhouse 'setuptools>=77' wheel
	@touch $@

demo: $(STAMP)
	$(VENV)/bin/rootcause-demo

# two pytest workers: most tests wait on real processes and servers, so two run in the time of one;
# tests handed out one at a time, in order (the slow ones first), so both workers share the slow ones
test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/pytest -n 2 --maxschedchunk 1 -m "not compat"

# the compatibility lane (.ci/run, after the suite): the plugin installed from its wheels on the oldest,
# a middle and the newest of each upstream, faults judged at the operator's decision (tests/compat);
# each torch release's virtualenv is kept under ~/.cache/rootcause-compat (ROOTCAUSE_COMPAT_CACHE)
compat: $(STAMP)
	$(VENV)/bin/pytest -n 2 -m compat tests/compat

lint: $(STAMP)
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) build *.egg-info
