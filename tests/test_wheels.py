"""The shipped wheels carry the product only: no simulated job, fault injection or demo.

A task image installs the repository root (flytekit's front-end), ``distributions/backend-reader``,
``distributions/rootcause-engine`` and ``distributions/flyteplugins-rootcause``; the development
harness (``rootcause_harness``: simulated PyTorchJobs, the faults they inject, the operator's
decision, the demos) is its own distribution, installed only for development. Each shipped wheel is
built here, offline, from the checkout, and its file list is checked.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = {
    "flytekitplugins-rootcause": ROOT,
    "flyte-rootcause-reader": ROOT / "distributions" / "backend-reader",
    "rootcause-engine": ROOT / "distributions" / "rootcause-engine",
    "flyteplugins-rootcause": ROOT / "distributions" / "flyteplugins-rootcause",
}
#: Names no shipped file may carry: the harness, simulated jobs, fault injection, the demos.
HARNESS_MARKS = ("rootcause_harness", "simulation", "simulate", "faults", "demo", "sitecustomize", "training_loop")


def build_wheel(source: Path, into: Path) -> Path:
    """One wheel of ``source``, built offline with this environment's setuptools (in a copy of the
    tree, so no ``build/`` folder is left in the checkout)."""
    copy = into / "src"
    shutil.copytree(source.resolve(), copy, symlinks=False, ignore=shutil.ignore_patterns(
        ".venv", ".git", "build", "*.egg-info", "__pycache__", "tests", "benchmarks", ".pytest_cache"))
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(into), str(copy)],
        capture_output=True, text=True, timeout=240, check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    [wheel] = into.glob("*.whl")
    return wheel


@pytest.mark.slow
@pytest.mark.parametrize("distribution", sorted(SHIPPED))
def test_a_shipped_wheel_holds_no_harness(distribution: str, tmp_path: Path) -> None:
    names = zipfile.ZipFile(build_wheel(SHIPPED[distribution], tmp_path)).namelist()
    modules = [name for name in names if name.endswith(".py")]
    assert modules, names  # the wheel holds the product
    found = [name for name in names if any(mark in name.lower() for mark in HARNESS_MARKS)]
    assert not found, found


def test_the_harness_is_a_distribution_of_its_own() -> None:
    """The demos' console scripts come from the harness's distribution, not a shipped one."""
    pyproject = (ROOT / "distributions" / "rootcause-harness" / "pyproject.toml").read_text()
    assert 'rootcause-demo = "rootcause_harness.flytekit.demo:main"' in pyproject
    assert 'rootcause-demo-flyte2 = "rootcause_harness.flyte2.demo:main"' in pyproject
    for source in SHIPPED.values():
        for config in ("setup.cfg", "pyproject.toml"):
            path = source / config
            assert not path.exists() or "rootcause_harness" not in path.read_text(), path
