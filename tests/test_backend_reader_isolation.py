"""backend_reader must install and import without flytekit or torch (a backend service uses it)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import backend_reader

FORBIDDEN = ("flytekit", "flytekitplugins_rootcause", "torch")


def forbidden(module: str) -> bool:
    """flytekit, torch, our agent side, or a flytekit plugin (the bare ``flytekitplugins`` namespace
    package is created at start-up by kfpytorch's ``.pth`` file, before any import of ours)."""
    return module.split(".")[0] in FORBIDDEN or module.startswith("flytekitplugins.")


def test_importing_every_module_pulls_in_neither_flytekit_nor_torch() -> None:
    modules = sorted(f"backend_reader.{p.stem}" for p in Path(backend_reader.__file__).parent.glob("*.py"))
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r}"
        " or m.startswith('flytekitplugins.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_no_module_names_flytekit_or_torch_in_an_import() -> None:
    """Also catches imports inside functions, which the subprocess check would not execute."""
    for path in Path(backend_reader.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            assert not [n for n in names if forbidden(n) or n == "flytekitplugins"], f"{path.name}: {names}"
