"""The shipped wheels carry the product only, and can be published as they are.

A task image installs the repository root (flytekit's front-end), ``distributions/rootcause-core``,
``distributions/backend-reader``, ``distributions/rootcause-engine`` and
``distributions/flyteplugins-rootcause``; the development harness (``rootcause_harness``: simulated
PyTorchJobs, the faults they inject, the operator's decision, the demos) is its own distribution,
installed only for development. Each shipped wheel is built here once, offline, from the checkout,
and its file list and metadata are checked: no harness module, a LICENSE, one version, requirements
with lower bounds only (compatible ranges between our own), and a Flyte 2 install that pulls no
Flyte 1 package.
"""

from __future__ import annotations

import email
import email.message
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = {
    "flytekitplugins-rootcause": ROOT,
    "rootcause-core": ROOT / "distributions" / "rootcause-core",
    "flyte-rootcause-reader": ROOT / "distributions" / "backend-reader",
    "rootcause-engine": ROOT / "distributions" / "rootcause-engine",
    "flyteplugins-rootcause": ROOT / "distributions" / "flyteplugins-rootcause",
}
HARNESS = ROOT / "distributions" / "rootcause-harness"
#: Names no shipped file may carry: the harness, simulated jobs, fault injection, the demos.
HARNESS_MARKS = ("rootcause_harness", "simulation", "simulate", "faults", "demo", "sitecustomize", "training_loop")
#: What a Flyte 2 install must not pull through our distributions: Flyte 1 and its reader's stack.
FLYTE_1_ONLY = {
    "flytekit", "flytekitplugins-kfpytorch", "flyteidl", "gcsfs", "s3fs", "click", "rich",
    "flytekitplugins-rootcause", "flyte-rootcause-reader",
}
#: The upstreams the plugins follow: a lower bound only (an upper bound only for a version known to break).
UPSTREAMS = {"torch", "flytekit", "flytekitplugins-kfpytorch", "flyte", "flyteplugins-pytorch"}
PROJECT_URLS = {"Homepage", "Documentation", "Source", "Issues"}
REPOSITORY = "https://github.com/flyteorg/flytekitplugins-rootcause"


def build_wheel(source: Path, into: Path) -> Path:
    """One wheel of ``source``, built offline with this environment's setuptools (in a copy of the
    tree, links resolved, so no ``build/`` folder is left in the checkout)."""
    into.mkdir(parents=True, exist_ok=True)
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


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every shipped distribution's wheel, and the harness's, built once for the module."""
    base = tmp_path_factory.mktemp("wheels")
    sources = {**SHIPPED, "rootcause-harness": HARNESS}
    return {name: build_wheel(source, base / name) for name, source in sources.items()}


def metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as archive:
        [name] = [name for name in archive.namelist() if name.endswith(".dist-info/METADATA")]
        return email.message_from_bytes(archive.read(name))


def requirements(wheel: Path) -> list[Requirement]:
    """The wheel's unconditional requirements (its extras, ``test``, are for development)."""
    found = [Requirement(line) for line in metadata(wheel).get_all("Requires-Dist") or []]
    return [requirement for requirement in found if not requirement.marker or "extra" not in str(requirement.marker)]


@pytest.mark.slow
@pytest.mark.parametrize("distribution", sorted(SHIPPED))
def test_a_shipped_wheel_holds_no_harness(distribution: str, wheels: dict[str, Path]) -> None:
    names = zipfile.ZipFile(wheels[distribution]).namelist()
    modules = [name for name in names if name.endswith(".py")]
    assert modules, names  # the wheel holds the product
    found = [name for name in names if any(mark in name.lower() for mark in HARNESS_MARKS)]
    assert not found, found


@pytest.mark.slow
def test_every_wheel_reports_the_one_version(wheels: dict[str, Path]) -> None:
    version = (ROOT / "VERSION").read_text().strip()
    assert {name: metadata(wheel)["Version"] for name, wheel in wheels.items()} == dict.fromkeys(wheels, version)


@pytest.mark.slow
def test_every_wheel_carries_the_license_and_the_project_urls(wheels: dict[str, Path]) -> None:
    license_text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    for name, wheel in wheels.items():
        with zipfile.ZipFile(wheel) as archive:
            licenses = [entry for entry in archive.namelist() if entry.endswith(".dist-info/licenses/LICENSE")]
            assert len(licenses) == 1, (name, archive.namelist())
            assert archive.read(licenses[0]).decode() == license_text, name
        fields = metadata(wheel)
        assert fields["License-Expression"] == "Apache-2.0", name
        urls = dict(value.split(", ", 1) for value in fields.get_all("Project-URL") or [])
        assert set(urls) == PROJECT_URLS, (name, urls)
        assert all(url.startswith(REPOSITORY) for url in urls.values()), (name, urls)


@pytest.mark.slow
def test_a_flyte2_install_pulls_no_flyte1_package(wheels: dict[str, Path]) -> None:
    """``pip install flyteplugins-rootcause``: its requirements, closed over our own distributions,
    name nothing of Flyte 1 (flytekit, flyteidl 1.x, the reader's gcsfs, s3fs, click, rich)."""
    ours = {canonicalize_name(name): wheel for name, wheel in wheels.items()}
    pulled: set[str] = set()
    pending = ["flyteplugins-rootcause"]
    while pending:
        for requirement in requirements(ours[pending.pop()]):
            name = canonicalize_name(requirement.name)
            if name not in pulled:
                pulled.add(name)
                if name in ours:
                    pending.append(name)
    assert {"rootcause-core", "rootcause-engine", "flyte", "flyteplugins-pytorch", "torch"} <= pulled, pulled
    assert pulled & FLYTE_1_ONLY == set()


@pytest.mark.slow
def test_requirements_state_lower_bounds_and_compatible_ranges_between_ours(wheels: dict[str, Path]) -> None:
    ours = {canonicalize_name(name) for name in wheels}
    for name, wheel in wheels.items():
        for requirement in requirements(wheel):
            required = canonicalize_name(requirement.name)
            operators = {spec.operator for spec in requirement.specifier}
            if required in UPSTREAMS:
                assert operators and operators <= {">=", ">", "!="}, f"{name}: {requirement} (a lower bound only)"
            if required in ours:
                assert not operators & {"==", "==="}, f"{name}: {requirement} (pinned)"
                assert operators & {"~=", "<"}, f"{name}: {requirement} (a compatible range)"


@pytest.mark.slow
def test_long_descriptions_read_well_on_a_package_index(wheels: dict[str, Path]) -> None:
    """Each shipped wheel's page is its own README, with no link into a checkout (relative paths,
    the Makefile's commands): links are absolute."""
    descriptions = {}
    for name in SHIPPED:
        fields = metadata(wheels[name])
        assert fields["Description-Content-Type"] == "text/markdown", name
        descriptions[name] = body = fields.get_payload()
        assert body.lstrip().startswith("# "), name
        targets = re.findall(r"\]\(([^)\s]+)\)", body)
        assert all(re.match(r"https://", target) for target in targets), (name, targets)
        for repo_only in ("./distributions", "](docs/", "make demo", "make test", ".venv/"):
            assert repo_only not in body, (name, repo_only)
    assert len(set(descriptions.values())) == len(descriptions)  # each its own
    assert descriptions["flytekitplugins-rootcause"] != (ROOT / "README.md").read_text()


def test_the_harness_is_a_distribution_of_its_own() -> None:
    """The demos' console scripts come from the harness's distribution, not a shipped one."""
    pyproject = (HARNESS / "pyproject.toml").read_text()
    assert 'rootcause-demo = "rootcause_harness.flytekit.demo:main"' in pyproject
    assert 'rootcause-demo-flyte2 = "rootcause_harness.flyte2.demo:main"' in pyproject
    for source in SHIPPED.values():
        for config in ("setup.cfg", "pyproject.toml"):
            path = source / config
            assert not path.exists() or "rootcause_harness" not in path.read_text(), path
