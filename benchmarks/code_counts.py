"""What a newcomer must hold in their head: the counts of issue 51's table, for any source tree.

Why: "smaller" is a claim like any other, so it is measured, the same way for this project and for
the projects it is compared with (torch's elastic agent, NVIDIA's resiliency extension). Counted from
the source (``ast``), never from a run:

- modules and lines (blank lines and comments included, as ``wc -l`` counts them);
- thread kinds: distinct thread names given where a ``Thread`` is made (or a ``GuardedLoop``), plus
  thread subclasses; pools (``ThreadPoolExecutor``, a ``...Pool`` class's threads) and forked
  processes apart;
- locks: each place a ``Lock``, ``RLock``, ``Condition`` or ``Semaphore`` is made;
- the biggest class: its lines and public methods (properties apart);
- store operations named by a string (``call("set", ...)``) outside the typed store's modules.

``python -m benchmarks.code_counts`` prints this project's row;
``python -m benchmarks.code_counts --roots <folder>...`` another's (e.g. torch's
``torch/distributed/elastic``).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import re
from collections.abc import Iterable
from pathlib import Path

#: This project's product code (what users install), relative to the repository root.
PRODUCT = ("rootcause_core", "rootcause_engine", "flytekitplugins_rootcause", "flyteplugins", "backend_reader")
#: The typed store: the only modules that may name a store operation by a string.
TYPED_STORE = ("rootcause_engine/agent/bounded_store.py", "rootcause_engine/agent/store_values.py",
               "rootcause_engine/agent/round_store.py", "rootcause_engine/agent/soft_world_store.py")
#: The operations of torch's ``Store`` (what a string operation name may be).
STORE_OPERATIONS = frozenset({"set", "get", "add", "compare_set", "check", "multi_get", "multi_set", "wait",
                              "delete_key", "num_keys", "append", "queue_push", "queue_pop"})
_LOCKS = frozenset({"Lock", "RLock", "Condition", "Semaphore", "BoundedSemaphore"})
_POOLS = frozenset({"ThreadPoolExecutor", "ProcessPoolExecutor"})
_THREAD_MAKERS = frozenset({"Thread", "Timer", "GuardedLoop", "guarded_thread"})


@dataclasses.dataclass
class Counts:
    modules: int = 0
    lines: int = 0
    thread_kinds: set[str] = dataclasses.field(default_factory=set)
    pools: int = 0
    forks: int = 0
    locks: int = 0
    biggest: tuple[int, int, str] = (0, 0, "")  # (lines, public methods, name)
    most_methods: tuple[int, str] = (0, "")
    string_operations: list[str] = dataclasses.field(default_factory=list)


def _callee(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _thread_name(node: ast.Call) -> str | None:
    """The literal name a thread is given; ``""`` where the name is passed through (a factory of
    threads, whose callers are counted); ``None`` where it has none."""
    named = [k.value for k in node.keywords if k.arg == "name"]
    if _callee(node) == "GuardedLoop" and node.args:
        named.append(node.args[0])
    for value in named:
        return value.value if isinstance(value, ast.Constant) and isinstance(value.value, str) else ""
    return None


def _public_methods(node: ast.ClassDef) -> int:
    def is_property(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        return any((isinstance(d, ast.Name) and d.id in ("property", "cached_property"))
                   or (isinstance(d, ast.Attribute) and d.attr in ("setter", "cached_property"))
                   for d in function.decorator_list)
    return sum(1 for item in node.body if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
               and not item.name.startswith("_") and not is_property(item))


def count(files: Iterable[Path], base: Path, typed_store: tuple[str, ...] = ()) -> Counts:
    counts = Counts()
    for path in files:
        text = path.read_text(errors="replace")
        counts.modules += 1
        counts.lines += text.count("\n")
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        relative = path.relative_to(base).as_posix()
        pool_classes = [c for c in ast.walk(tree) if isinstance(c, ast.ClassDef) and c.name.endswith("Pool")]
        pooled = {id(n) for c in pool_classes for n in ast.walk(c)}  # a pool's own threads are the pool
        counts.pools += len(pool_classes)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                size, methods = (node.end_lineno or node.lineno) - node.lineno + 1, _public_methods(node)
                name = f"{relative}:{node.name}"
                counts.biggest = max(counts.biggest, (size, methods, name))
                counts.most_methods = max(counts.most_methods, (methods, name))
                if any(isinstance(b, ast.Name | ast.Attribute) and (getattr(b, "id", "") or getattr(b, "attr", ""))
                       == "Thread" for b in node.bases):
                    counts.thread_kinds.add(node.name)
            if not isinstance(node, ast.Call):
                continue
            callee = _callee(node)
            if callee in _LOCKS:
                counts.locks += 1
            elif callee in _POOLS:
                counts.pools += 1
            elif callee == "fork":
                counts.forks += 1
            elif callee in _THREAD_MAKERS and id(node) not in pooled:
                name = _thread_name(node)
                if name != "":
                    counts.thread_kinds.add(name if name is not None else f"{relative}:{node.lineno}")
            if (relative not in typed_store and node.args and isinstance(node.args[0], ast.Constant)
                    and node.args[0].value in STORE_OPERATIONS and re.search(r"call$", callee)):
                counts.string_operations.append(f"{relative}:{node.lineno}")
    return counts


def python_files(roots: Iterable[Path]) -> list[Path]:
    return sorted(path for root in roots for path in (root.rglob("*.py") if root.is_dir() else [root])
                  if "test" not in path.parts and not path.name.startswith("test_"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--roots", nargs="*", type=Path, help="folders to count (default: this project's product)")
    args = parser.parse_args()
    base = Path(__file__).resolve().parent.parent
    roots = args.roots or [base / root for root in PRODUCT]
    common = Path(*Path(roots[0]).resolve().parts[:-1]) if args.roots else base
    counts = count(python_files(Path(r).resolve() for r in roots), common, () if args.roots else TYPED_STORE)
    lines, methods, name = counts.biggest
    print(f"modules                 {counts.modules}")
    print(f"lines                   {counts.lines}")
    print(f"thread kinds            {len(counts.thread_kinds)} ({', '.join(sorted(counts.thread_kinds))})")
    print(f"pools, forks            {counts.pools}, {counts.forks}")
    print(f"locks                   {counts.locks}")
    print(f"biggest class           {name}: {lines} lines, {methods} public methods")
    print(f"most public methods     {counts.most_methods[1]}: {counts.most_methods[0]}")
    print(f"string store operations {len(counts.string_operations)} {' '.join(counts.string_operations)}")
    if not args.roots:
        readme = (base / "README.md").read_text()
        print(f"README                  {readme.count(chr(10))} lines, {len(readme.split())} words")


if __name__ == "__main__":
    main()
