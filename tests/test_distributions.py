"""Every distribution of the repository takes its version, license and README from one place each,
without building anything (``tests/test_wheels.py`` checks what the built wheels carry)."""

from __future__ import annotations

import configparser
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DISTRIBUTIONS = sorted(path.parent for path in (ROOT / "distributions").glob("*/pyproject.toml"))


def test_the_distributions_are_the_expected_ones() -> None:
    assert [path.name for path in DISTRIBUTIONS] == [
        "backend-reader", "flyteplugins-rootcause", "rootcause-core", "rootcause-engine", "rootcause-harness",
    ]


@pytest.mark.parametrize("distribution", DISTRIBUTIONS, ids=lambda path: path.name)
def test_a_distribution_reads_the_one_version_and_license(distribution: Path) -> None:
    project = tomllib.loads((distribution / "pyproject.toml").read_text())
    assert "version" not in project["project"] and project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"file": "VERSION"}
    assert project["project"]["license-files"] == ["LICENSE"]
    for linked in ("VERSION", "LICENSE"):
        assert (distribution / linked).resolve() == ROOT / linked, linked
    readme = distribution / project["project"].get("readme", "README.md")
    assert readme.is_file() and not readme.is_symlink(), readme  # its own page, not a repository doc


def test_the_root_distribution_reads_the_one_version_and_its_own_readme() -> None:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    metadata = config["metadata"]
    assert metadata["version"] == "file: VERSION"
    assert metadata["license_files"].strip() == "LICENSE"
    readme = metadata["long_description"].removeprefix("file: ")
    assert readme != "README.md" and (ROOT / readme).is_file()


def test_the_version_is_one_release() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+", (ROOT / "VERSION").read_text().strip())


def test_the_makefile_and_the_dockerfile_share_the_default_pins() -> None:
    """One default pin each for speed, the same in the Makefile and the task image."""
    makefile = dict(re.findall(r"^(\w+_VERSION) \?= (\S+)$", (ROOT / "Makefile").read_text(), re.MULTILINE))
    dockerfile = dict(re.findall(r"^ARG (\w+_VERSION)=(\S+)$", (ROOT / "Dockerfile").read_text(), re.MULTILINE))
    assert set(makefile) == {"TORCH_VERSION", "FLYTEKIT_VERSION", "FLYTE_VERSION"}
    assert makefile == dockerfile
