"""The layout's rules, checked on the source: who may import whom, and no import circle.

``docs/architecture.md`` draws the same rules. Imports are read with ``ast`` (nested ones too), so a
rule holds for code paths no other test happens to run.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = (
    "rootcause_core", "backend_reader", "rootcause_engine", "flytekitplugins_rootcause", "flyteplugins",
    "rootcause_harness",
)
#: The development harness (simulated jobs, faults, demos): no shipped package may import it.
HARNESS = "rootcause_harness"


def module_files() -> Iterator[tuple[str, Path]]:
    for package in PACKAGES:
        # ``flyteplugins`` is Flyte 2's namespace: ours is ``flyteplugins.rootcause`` (upstream's own
        # ``flyteplugins.pytorch`` lives in site-packages, outside the tree)
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
    ("rootcause_core",
     ("backend_reader", "rootcause_engine", "flytekitplugins_rootcause", "flyteplugins.rootcause", HARNESS), ()),
    ("backend_reader", ("rootcause_engine", "flytekitplugins_rootcause", "flyteplugins.rootcause", HARNESS), ()),
    # the engine runs in the agent and the workers of any front-end: no front-end, no reader, no harness
    ("rootcause_engine", ("flytekitplugins_rootcause", "flyteplugins.rootcause", "backend_reader", HARNESS), ()),
    ("rootcause_engine.worker", ("rootcause_engine.agent",), ()),
    # the soft-restart API runs in workers: the same rule as the worker folder
    ("rootcause_engine.soft_restart", ("rootcause_engine.agent",), ()),
    # the seams know upstream, not the project: everything else calls them, never the other way round
    ("rootcause_engine.upstream", ("rootcause_core", "backend_reader", "rootcause_engine", "flytekitplugins_rootcause"),
     ("rootcause_engine.upstream",)),
    ("flytekitplugins_rootcause.upstream",
     ("rootcause_core", "backend_reader", "rootcause_engine", "flytekitplugins_rootcause"),
     ("flytekitplugins_rootcause.upstream", "rootcause_engine.upstream")),
    # the entrypoint runs around the task in the pod's main process, torch not loaded: of the engine,
    # only the last-resort sink the watchdog hands its report to
    ("flytekitplugins_rootcause.entrypoint",
     ("rootcause_engine", "backend_reader", "flytekitplugins_rootcause.task", "flytekitplugins_rootcause.straggler"),
     ("rootcause_engine.agent.failure_sink",)),
    ("flytekitplugins_rootcause.config", ("flytekitplugins_rootcause.task",), ()),
    # the two front-ends stand on the engine side by side; neither imports the other, nor the reader
    ("flytekitplugins_rootcause", ("flyteplugins.rootcause", HARNESS), ()),
    ("flyteplugins.rootcause", ("flytekitplugins_rootcause", "backend_reader", HARNESS), ()),
    # the harness: each flavour's simulator and demo stands on its own front-end only (what both
    # share is Flyte-free: test_the_shared_harness_imports_no_front_end)
    ("rootcause_harness.flytekit", ("flyteplugins.rootcause", "rootcause_harness.flyte2"), ()),
    ("rootcause_harness.flyte2", ("flytekitplugins_rootcause", "backend_reader", "rootcause_harness.flytekit"), ()),
    ("flyteplugins.rootcause.config", ("flyteplugins.rootcause.task",), ()),
    ("flyteplugins.rootcause.upstream",
     ("rootcause_core", "backend_reader", "rootcause_engine", "flytekitplugins_rootcause", "flyteplugins.rootcause"),
     ("flyteplugins.rootcause.upstream", "rootcause_engine.upstream")),
    # the straggler check runs in the workers and its task type in the pod; it may use the engine
    # (the store host, the store keepers), not the root-cause task, its entrypoint or its Deck
    ("flytekitplugins_rootcause.straggler",
     ("flytekitplugins_rootcause.entrypoint", "flytekitplugins_rootcause.task", "flytekitplugins_rootcause.report",
      "flytekitplugins_rootcause.exceptions"), ()),
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


#: Every room of the tree and the rule that governs it (docs/architecture.md has one row for each).
ROOMS = {
    "rootcause_core": "rootcause_core",
    "backend_reader": "backend_reader",
    "rootcause_engine": "rootcause_engine",
    "rootcause_engine.agent": "rootcause_engine",
    "rootcause_engine.worker": "rootcause_engine.worker",
    "rootcause_engine.upstream": "rootcause_engine.upstream",
    "rootcause_engine.soft_restart": "rootcause_engine.soft_restart",
    "rootcause_engine.distributed": "rootcause_engine",
    "rootcause_engine.settings": "rootcause_engine",

    "flytekitplugins_rootcause.upstream": "flytekitplugins_rootcause.upstream",
    "flytekitplugins_rootcause.entrypoint": "flytekitplugins_rootcause.entrypoint",
    "flytekitplugins_rootcause.config": "flytekitplugins_rootcause.config",
    "flytekitplugins_rootcause.straggler": "flytekitplugins_rootcause.straggler",
    # the front-end's top level and local-run code: anything above them, nothing imports them back
    "flytekitplugins_rootcause": None,
    # Flyte 2's front-end: config, task, errors, report, its seam
    "flyteplugins.rootcause": "flyteplugins.rootcause",
    "flyteplugins.rootcause.config": "flyteplugins.rootcause.config",
    "flyteplugins.rootcause.upstream": "flyteplugins.rootcause.upstream",
    # the development harness: what both simulators share, and each flavour's simulator and demo
    HARNESS: None,  # its own test: test_the_shared_harness_imports_no_front_end
    "rootcause_harness.flytekit": "rootcause_harness.flytekit",
    "rootcause_harness.flyte2": "rootcause_harness.flyte2",
}


def room_of(module: str) -> str | None:
    """The most specific room ``module`` lives in."""
    return max((room for room in ROOMS if inside(module, room)), key=len, default=None)


def test_every_module_is_in_a_room_the_rules_know() -> None:
    """A new module lands in a known room (or the rules and docs/architecture.md learn about it)."""
    strays = [name for name in GRAPH if room_of(name) is None]
    assert not strays, strays
    ruled = {rule[0] for rule in RULES}
    assert {rule for rule in ROOMS.values() if rule is not None} <= ruled


def test_nothing_imports_the_front_end_s_top_level_or_the_demo_back() -> None:
    """The task, its exceptions and its Deck are the front-end's last step; the demo is local-run
    code. Only the front-end's own top level and its simulator may import them."""
    tops = ("flytekitplugins_rootcause.task", "flytekitplugins_rootcause.report", "rootcause_harness.flytekit.demo")
    broken = sorted(
        f"{name} -> {target}"
        for name in GRAPH
        if room_of(name) not in ("flytekitplugins_rootcause", "rootcause_harness.flytekit")
        for target in edges(name)
        if inside(target, *tops)
    )
    assert not broken, broken


FRONT_ENDS = ("flytekit", "flytekitplugins", "flyte", "flyteplugins", "flyteidl", "flyteidl2")


def test_the_shared_harness_imports_no_front_end() -> None:
    """What both flavours' simulators share (pods, faults, training loops, the operator) is Flyte-free:
    only ``rootcause_harness.flytekit`` and ``rootcause_harness.flyte2`` know their front-end."""
    flavours = ("rootcause_harness.flytekit", "rootcause_harness.flyte2")
    shared = [name for name in GRAPH if inside(name, HARNESS) and not inside(name, *flavours)]
    assert shared
    broken = sorted(
        f"{name} -> {target}"
        for name in shared
        for target in edges(name)
        if inside(target, "flytekitplugins_rootcause", "flyteplugins.rootcause", *flavours)
    )
    broken += [entry for entry in outside_imports(HARNESS, FRONT_ENDS) if entry.split(" -> ")[0] in shared]
    assert not broken, broken


def test_the_engine_imports_no_front_end_in_its_source() -> None:
    """No engine module names flytekit, kfpytorch or flyte in an import, nested imports included."""
    broken = outside_imports("rootcause_engine", FRONT_ENDS)
    assert not broken, broken


def outside_imports(package: str, tops: tuple[str, ...]) -> list[str]:
    """``module -> import`` for each import in ``package``'s source of a top-level name in ``tops``."""
    broken = []
    for name, path in module_files():
        if not inside(name, package):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            broken += [f"{name} -> {module}" for module in names if module.split(".")[0] in tops]
    return broken


#: Flyte 1's packages, which Flyte 2's front-end never imports (it installs beside them, apart).
FLYTE_1 = ("flytekit", "flytekitplugins", "flyteidl")


def test_the_flyte_2_front_end_imports_no_flytekit_in_its_source() -> None:
    """No ``flyteplugins.rootcause`` module names flytekit, kfpytorch or flyteidl in an import."""
    broken = outside_imports("flyteplugins.rootcause", FLYTE_1)
    assert not broken, broken


def test_importing_every_engine_module_loads_no_front_end() -> None:
    """The engine is usable without flytekit: a fresh interpreter imports every engine module and
    finds no flytekit, kfpytorch or flyte module loaded (only what the interpreter itself had at
    start, e.g. a namespace package's ``.pth`` stub)."""
    engine = sorted(name for name, _ in module_files() if inside(name, "rootcause_engine"))
    code = (
        "import importlib, json, sys\n"
        "before = set(sys.modules)\n"
        f"for name in {engine!r}:\n"
        "    importlib.import_module(name)\n"
        f"print(json.dumps(sorted(m for m in set(sys.modules) - before if m.split('.')[0] in {FRONT_ENDS!r})))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def product_modules() -> Iterator[Path]:
    """Every product module file (``__init__``/``__main__`` apart), relative to the repository."""
    for _, path in module_files():
        if path.name not in ("__init__.py", "__main__.py"):
            yield path.relative_to(ROOT)


def test_every_module_has_a_test_file_at_its_mirrored_path() -> None:
    """``<package path>/<module>.py`` is tested in ``tests/<package path>/test_<module>.py``: a newcomer finds a
    module's tests without searching."""
    missing = [
        str(module) for module in product_modules()
        if not (ROOT / "tests" / module.parent / f"test_{module.name}").is_file()
    ]
    assert missing == []


def test_every_test_file_under_a_package_s_mirror_is_named_for_a_module_beside_it() -> None:
    """A test of one aspect of a module is ``test_<module>_<aspect>.py``; a test about several modules is a
    scenario (``tests/scenarios/``), not a file in a module's folder."""
    stray = []
    for package in PACKAGES:
        for test_file in sorted((ROOT / "tests" / package).rglob("test_*.py")):
            source_folder = ROOT / test_file.parent.relative_to(ROOT / "tests")
            modules = {path.stem for path in source_folder.glob("*.py")}
            name = test_file.stem.removeprefix("test_")
            if not any(name == module or name.startswith(f"{module}_") for module in modules):
                stray.append(str(test_file.relative_to(ROOT)))
    assert stray == []
