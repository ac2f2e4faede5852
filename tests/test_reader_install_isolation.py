"""backend_reader and the shared core must install and import without flytekit or torch (a backend
service uses them)."""

from __future__ import annotations

import ast
import importlib.metadata
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from packaging.requirements import Requirement

import backend_reader
import rootcause_core

FORBIDDEN = ("flytekit", "flytekitplugins_rootcause", "torch")
PACKAGE_DIRS = [Path(package.__file__).resolve().parent for package in (backend_reader, rootcause_core)]
PACKAGE_DIR = PACKAGE_DIRS[0]
MODULE_FILES = sorted(path for folder in PACKAGE_DIRS for path in folder.glob("*.py"))
OWN_PACKAGES = {folder.name for folder in PACKAGE_DIRS}


def module_name(path: Path) -> str:
    return f"{path.parent.name}.{path.stem}"


def forbidden(module: str) -> bool:
    """flytekit, torch, our agent side, or a flytekit plugin (the bare ``flytekitplugins`` namespace
    package is created at start-up by kfpytorch's ``.pth`` file, before any import of ours)."""
    return module.split(".")[0] in FORBIDDEN or module.startswith("flytekitplugins.")


def test_importing_every_module_pulls_in_neither_flytekit_nor_torch() -> None:
    modules = [module_name(path) for path in MODULE_FILES]
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r}"
        " or m.startswith('flytekitplugins.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def imports_in(path: Path) -> list[tuple[str, int]]:
    """(module name, relative level) of every import statement in a file, nested ones included."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(alias.name, 0) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.module, node.level))
    return found


def test_no_module_names_flytekit_or_torch_in_an_import() -> None:
    """Also catches imports inside functions, which the subprocess check would not execute."""
    for path in MODULE_FILES:
        names = [name for name, _ in imports_in(path)]
        assert not [n for n in names if forbidden(n) or n == "flytekitplugins"], f"{module_name(path)}: {names}"


def test_the_reader_distribution_ships_backend_reader_alone_with_its_dependencies(tmp_path: Path) -> None:
    """``distributions/backend-reader`` builds a wheel a backend service installs without flytekit or
    torch: it holds exactly the repository's ``backend_reader`` modules, requires ``rootcause-core``
    (the shared vocabulary, its own distribution) and declares a dependency for every third-party
    package they import."""
    root = PACKAGE_DIR.parent
    # Built from a copy (links followed, no build/ or egg-info): setuptools reuses a stale build/lib
    # in the source folder, which once shipped a module the repository no longer has.
    source = tmp_path / "backend-reader"
    shutil.copytree(root / "distributions" / "backend-reader", source,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    wheels = tmp_path / "wheels"
    build = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels)]
    subprocess.run([*build, str(source)], check=True, capture_output=True)
    (wheel,) = wheels.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata_name = next(name for name in names if name.endswith(".dist-info/METADATA"))
        metadata = archive.read(metadata_name).decode()
        entry_points = archive.read(metadata_name.replace("METADATA", "entry_points.txt")).decode()
    shipped = sorted(name for name in names if not name.split("/")[0].endswith(".dist-info"))
    assert shipped == sorted(f"{path.parent.name}/{path.name}" for path in MODULE_FILES if path.parent == PACKAGE_DIR)
    assert "rootcause-reader = backend_reader.cli:main" in entry_points

    required = {
        Requirement(line.split(":", 1)[1].strip()).name.lower().replace("_", "-")
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist:")
    }
    assert not [name for name in required if forbidden(name.replace("-", "_"))]
    assert "rootcause-core" in required
    distributions = importlib.metadata.packages_distributions()
    imported = {name.split(".")[0] for path in MODULE_FILES for name, level in imports_in(path) if not level}
    third_party = {name for name in imported if name in distributions and name not in OWN_PACKAGES}
    for module in sorted(third_party):
        owners = {owner.lower().replace("_", "-") for owner in distributions[module]}
        # google.protobuf comes with protobuf; flyteidl pulls it in too.
        assert owners & required, f"backend_reader imports {module} ({owners}) but the wheel does not require it"
