"""The layout's rules, checked on the source: who may import whom, and no import circle.

``docs/architecture.md`` draws the same rules. Imports are read with ``ast`` (nested ones too), so a
rule holds for code paths no other test happens to run.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("rootcause_core", "backend_reader", "flytekitplugins_rootcause")


def module_files() -> Iterator[tuple[str, Path]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path


def imports_of(name: str, path: Path) -> set[str]:
    """Modules of ours that ``name`` imports, relative imports resolved."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {module for module in found if module.split(".")[0] in PACKAGES}


GRAPH = {name: imports_of(name, path) for name, path in module_files()}


def resolve(module: str) -> str | None:
    """The module file an imported name lives in (``pkg.mod.Name`` -> ``pkg.mod``)."""
    while module and module not in GRAPH:
        module = module.rpartition(".")[0]
    return module or None


def edges(name: str) -> set[str]:
    return {target for target in map(resolve, GRAPH[name]) if target and target != name}


def inside(module: str, *prefixes: str) -> bool:
    return any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes)


def test_no_import_circle_between_modules() -> None:
    """Package ``__init__`` modules that re-export their children are left out: importing a child
    runs its package first anyway, so an edge to a package is not a circle of ours."""
    packages = {name for name, path in module_files() if path.name == "__init__.py"}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(name: str) -> None:
        state[name] = 1
        stack.append(name)
        for target in sorted(edges(name) - packages):
            if state.get(target) == 1:
                pytest.fail("import circle: " + " -> ".join([*stack[stack.index(target):], target]))
            if target not in state:
                visit(target)
        stack.pop()
        state[name] = 2

    for name in sorted(GRAPH):
        if name not in state and name not in packages:
            visit(name)


# (the importing folder, what it may not import, except these modules)
RULES = [
    ("rootcause_core", ("backend_reader", "flytekitplugins_rootcause"), ()),
    ("backend_reader", ("flytekitplugins_rootcause",), ()),
    ("flytekitplugins_rootcause.worker", ("flytekitplugins_rootcause.agent", "flytekitplugins_rootcause.entrypoint",
                                          "flytekitplugins_rootcause.task"), ()),
    # the soft-restart API runs in workers: the same rule as the worker folder
    ("flytekitplugins_rootcause.soft_restart",
     ("flytekitplugins_rootcause.agent", "flytekitplugins_rootcause.entrypoint", "flytekitplugins_rootcause.task"), ()),
    ("flytekitplugins_rootcause.agent", ("flytekitplugins_rootcause.entrypoint", "flytekitplugins_rootcause.task"), ()),
    ("flytekitplugins_rootcause.entrypoint", ("flytekitplugins_rootcause.agent", "flytekitplugins_rootcause.worker",
                                              "flytekitplugins_rootcause.task"),
     ("flytekitplugins_rootcause.agent.failure_sink",)),
    ("flytekitplugins_rootcause.config", ("flytekitplugins_rootcause.task",), ()),
    # the seam knows upstream, not the plugin: everything else calls it, never the other way round
    ("flytekitplugins_rootcause.upstream", ("flytekitplugins_rootcause", "rootcause_core", "backend_reader"),
     ("flytekitplugins_rootcause.upstream",)),
]


@pytest.mark.parametrize(("folder", "forbidden", "allowed"), RULES, ids=[rule[0] for rule in RULES])
def test_each_folder_imports_only_what_its_process_may(folder: str, forbidden: tuple[str, ...],
                                                       allowed: tuple[str, ...]) -> None:
    broken = sorted(
        f"{name} -> {target}"
        for name in GRAPH
        if inside(name, folder)
        for target in edges(name)
        if inside(target, *forbidden) and not inside(target, *allowed)
    )
    assert not broken, broken


def test_every_module_is_in_a_folder_the_rules_know() -> None:
    """A new module lands in a known room (or the rules and docs/architecture.md learn about it)."""
    top_level = {"__init__", "config", "task", "exceptions", "demo", "distributed", "soft_restart"}
    rooms = {"worker", "agent", "entrypoint", "upstream", "straggler", "simulation"}
    strays = [
        name for name in GRAPH
        if name.startswith("flytekitplugins_rootcause.")
        and name.split(".")[1] not in top_level | rooms
    ]
    assert not strays, strays
