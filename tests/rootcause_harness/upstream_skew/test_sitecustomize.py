"""``rootcause_harness/upstream_skew/sitecustomize.py``: a real interpreter started with the variables of
``faults.upstream_skew_env`` sees the attributes named removed, the classes named frozen, the versions named."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from rootcause_harness.faults import (
    FROZEN_CLASSES_VARIABLE,
    REMOVED_ATTRIBUTES_VARIABLE,
    UPSTREAM_SKEW_DIR,
    upstream_skew_env,
)


def _run(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in (REMOVED_ATTRIBUTES_VARIABLE, FROZEN_CLASSES_VARIABLE)}
    return subprocess.run([sys.executable, "-c", code], env=base | env, capture_output=True, text=True, timeout=60)


def test_removed_attributes_are_gone_from_modules_submodules_and_classes(tmp_path: Path) -> None:
    env = upstream_skew_env(tmp_path, removed=("json.dumps", "os.path.join", "json.JSONDecoder.raw_decode"))
    run = _run("import json, os.path; print(hasattr(json, 'dumps'), hasattr(os.path, 'join'), "
               "hasattr(json.JSONDecoder, 'raw_decode'), hasattr(json, 'loads'))", env)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["False", "False", "False", "True"]


def test_a_frozen_class_refuses_a_patch_but_works_and_keeps_its_name(tmp_path: Path) -> None:
    env = upstream_skew_env(tmp_path, frozen=("json.decoder.JSONDecoder",))
    code = """
import json.decoder
cls = json.decoder.JSONDecoder
print(cls.__qualname__, cls.__module__, cls().decode('[1]'), issubclass(cls, cls.__mro__[1]), cls.__mro__[1].__name__)
try:
    cls.decode = None
except TypeError as error:
    print("refused:", error)
"""
    run = _run(code, env)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == "JSONDecoder json.decoder [1] True JSONDecoder"
    assert lines[1] == "refused: JSONDecoder is frozen here: cannot set decode"


def test_versions_are_what_importlib_metadata_reports(tmp_path: Path) -> None:
    env = upstream_skew_env(tmp_path / "dists", versions={"click": "0.0.1", "flyte-idl": "9.9.9"})
    assert (tmp_path / "dists" / "flyte_idl-9.9.9.dist-info" / "METADATA").read_text().splitlines()[1:3] == [
        "Name: flyte-idl", "Version: 9.9.9"]
    run = _run("from importlib.metadata import version; import click; print(version('click'), version('flyte-idl'))",
               env)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split()[-2:] == ["0.0.1", "9.9.9"]


def test_the_environment_puts_the_skew_first_and_keeps_the_pods_path(tmp_path: Path) -> None:
    env = upstream_skew_env(tmp_path, removed=("a.b", "c.d"), frozen=("e.F",), pythonpath="/somewhere/else")
    assert env == {
        "PYTHONPATH": os.pathsep.join([str(UPSTREAM_SKEW_DIR), str(tmp_path), "/somewhere/else"]),
        REMOVED_ATTRIBUTES_VARIABLE: "a.b,c.d",
        FROZEN_CLASSES_VARIABLE: "e.F",
    }


def test_nothing_named_changes_nothing(tmp_path: Path) -> None:
    run = _run("import json; print(hasattr(json, 'dumps'))", upstream_skew_env(tmp_path))
    assert (run.returncode, run.stdout.strip(), run.stderr) == (0, "True", "")


def test_a_name_with_no_importable_module_is_reported_at_start(tmp_path: Path) -> None:
    env = upstream_skew_env(tmp_path, removed=("no_such_module_anywhere.thing",))
    run = _run("print('ran')", env)
    assert "Error in sitecustomize" in run.stderr and "no_such_module_anywhere.thing" in run.stderr
    assert run.stdout.strip() == "ran"
