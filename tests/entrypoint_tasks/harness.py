"""Run the real entrypoint console scripts the way a pod does, and read back what they wrote.

A pod runs ``pyflyte-rootcause-execute --inputs ... --output-prefix ... --raw-output-data-prefix
... --resolver ... -- task-module <mod> task-name <name>`` with Flyte's environment; these helpers
build that command line, write ``inputs.pb`` with flytekit's literal models, point flytekit's own
data configuration at the store under test, and parse the ``ErrorDocument`` files that come back.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from flyteidl.core import errors_pb2, literals_pb2
from flytekit.core.data_persistence import FileAccessProvider
from flytekit.models import literals

from rootcause_harness.flytekit.job import StoreAccess
from testbed.object_stores import ObjectStore

REPO_ROOT = Path(__file__).resolve().parents[2]
BIN_DIR = Path(sys.executable).parent
ROOTCAUSE_EXECUTE = str(BIN_DIR / "pyflyte-rootcause-execute")
FLYTEKIT_EXECUTE = str(BIN_DIR / "pyflyte-execute")
RESOLVER = "flytekit.core.python_auto_container.default_task_resolver"

#: Backend-set variables a test must not inherit from the environment it runs in.
_BACKEND_VARIABLES = ("FLYTE_INTERNAL_DIST_ERROR_STRATEGY", "_F_DES", "FLYTE_INTERNAL_WORKER_NAME", "_F_WN")


@dataclasses.dataclass(frozen=True)
class Prefixes:
    """Where one run reads and writes: ``inputs.pb``, the output prefix, the raw-output prefix."""

    inputs: str
    output: str
    raw_output: str


@dataclasses.dataclass(frozen=True)
class Run:
    returncode: int
    stdout: str
    stderr: str

    def log_messages(self) -> list[str]:
        """flytekit's JSON log records (pods log JSON) from stderr, as plain messages."""
        messages = []
        for line in self.stderr.splitlines():
            if line.startswith("{"):
                try:
                    messages.append(json.loads(line)["message"])
                except (ValueError, KeyError):
                    continue
        return messages


def int_inputs(x: int) -> bytes:
    """A serialized ``LiteralMap`` {"x": x}, as Flyte's backend writes ``inputs.pb``."""
    literal = literals.Literal(scalar=literals.Scalar(primitive=literals.Primitive(integer=x)))
    return literals.LiteralMap({"x": literal}).to_flyte_idl().SerializeToString()


def new_prefixes(store: ObjectStore, x: int = 41, name: str = "run") -> Prefixes:
    """A fresh prefix in ``store`` holding ``inputs.pb``, as for one task attempt."""
    root = store.new_prefix(name)
    prefixes = Prefixes(inputs=f"{root}/inputs.pb", output=f"{root}/out", raw_output=f"{root}/raw")
    fs = store.filesystem()
    if store.protocol == "file":
        fs.makedirs(root, exist_ok=True)
    fs.pipe_file(prefixes.inputs, int_inputs(x))
    return prefixes


def pod_env(store: ObjectStore, **extra: str) -> dict[str, str]:
    """The environment of a pod: the test's own, minus backend variables, plus store access.

    flytekit reaches s3 through its own ``FLYTE_AWS_*`` settings, and gs through gcsfs (which
    honours ``STORAGE_EMULATOR_HOST`` and fsspec's ``FSSPEC_GS_TOKEN``, both in ``store.env``).
    ``FLYTE_INTERNAL_EXECUTION_ID`` makes flytekit log JSON lines, as in a pod.
    """
    env = {key: value for key, value in os.environ.items() if key not in _BACKEND_VARIABLES}
    env.update(StoreAccess(store.root, store.storage_options, store.env).pod_env())
    env.update(FLYTE_INTERNAL_EXECUTION_ID="entrypoint-test", PYTHONWARNINGS="ignore")
    env.update(extra)
    return env


def command(script: str, prefixes: Prefixes, module: str, task_name: str) -> list[str]:
    return [
        script,
        "--inputs",
        prefixes.inputs,
        "--output-prefix",
        prefixes.output,
        "--raw-output-data-prefix",
        prefixes.raw_output,
        "--resolver",
        RESOLVER,
        "--",
        "task-module",
        module,
        "task-name",
        task_name,
    ]


def run_task(
    store: ObjectStore,
    prefixes: Prefixes,
    module: str,
    task_name: str,
    script: str = ROOTCAUSE_EXECUTE,
    **env: str,
) -> Run:
    """Run one task in a fresh entrypoint process, from the repository root (as the image's workdir)."""
    completed = subprocess.run(
        command(script, prefixes, f"tests.entrypoint_tasks.{module}", task_name),
        cwd=REPO_ROOT,
        env=pod_env(store, **env),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    return Run(completed.returncode, completed.stdout, completed.stderr)


def list_names(store: ObjectStore, prefix: str) -> list[str]:
    """Names of the objects directly under ``prefix`` (empty if there are none)."""
    fs = store.filesystem()
    if not fs.exists(prefix):
        return []
    return sorted(path.rstrip("/").rsplit("/", 1)[-1] for path in fs.ls(prefix, detail=False))


def read_bytes(store: ObjectStore, path: str) -> bytes:
    return store.filesystem().cat_file(path)


def read_error(store: ObjectStore, path: str) -> errors_pb2.ContainerError:
    document = errors_pb2.ErrorDocument()
    document.ParseFromString(read_bytes(store, path))
    return document.error


def read_outputs(store: ObjectStore, prefix: str) -> literals_pb2.LiteralMap:
    outputs = literals_pb2.LiteralMap()
    outputs.ParseFromString(read_bytes(store, f"{prefix}/outputs.pb"))
    return outputs


def flytekit_file_access(tmp_path: Path, store: ObjectStore, monkeypatch: pytest.MonkeyPatch) -> FileAccessProvider:
    """flytekit's own provider, configured as in a pod, so its credential resolution is what is used."""
    if store.protocol == "s3":
        monkeypatch.setenv("FLYTE_AWS_ENDPOINT", store.storage_options["endpoint_url"])
        monkeypatch.setenv("FLYTE_AWS_ACCESS_KEY_ID", store.storage_options["key"])
        monkeypatch.setenv("FLYTE_AWS_SECRET_ACCESS_KEY", store.storage_options["secret"])
    return FileAccessProvider(local_sandbox_dir=str(tmp_path / "sandbox"), raw_output_prefix=store.root)
