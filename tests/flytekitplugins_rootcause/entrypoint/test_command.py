"""What Flyte puts in an ``ElasticRootCause`` task's container, and that a pod can run it as is.

The container args come from flytekit's own serialization (``get_serializable``, what ``pyflyte
package`` and ``pyflyte register`` use); the launch test then substitutes the templates the way
propeller does and runs exactly those args: the agent launches two real torch elastic workers, one
raises, and the patched entrypoint writes the root cause.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections import OrderedDict

import pytest
from flyteidl.core import errors_pb2
from flytekit.bin.entrypoint import execute_task_cmd as flytekit_command
from flytekit.configuration import FastSerializationSettings, ImageConfig, SerializationSettings
from flytekit.tools.translator import get_serializable

from flytekitplugins_rootcause.entrypoint.command import execute_task_cmd
from rootcause_core.ordering import Role
from rootcause_core.roles import role_from_marker
from rootcause_engine.agent.diagnosis.report import format_time
from testbed.object_stores import ObjectStore
from testbed.reader_support import per_worker_name_pattern
from tests.entrypoint_tasks import elastic, plain
from tests.entrypoint_tasks.harness import BIN_DIR, REPO_ROOT, list_names, new_prefixes, pod_env, read_error

SETTINGS = SerializationSettings(image_config=ImageConfig.auto_default_image(), project="p", domain="d", version="v1")
FAST = (
    SETTINGS.new_builder()
    .with_fast_serialization_settings(
        FastSerializationSettings(enabled=True, destination_dir="/root", distribution_location="s3://b/code.tgz")
    )
    .build()
)


def _container_args(entity, settings: SerializationSettings = SETTINGS) -> list[str]:
    """The task container's args: in ``container``, or in the pod spec (kfpytorch adds a pod
    template for shared memory, so elastic tasks serialize as ``k8s_pod``)."""
    template = get_serializable(OrderedDict(), settings, entity).template
    if template.container is not None:
        return list(template.container.args)
    (container,) = template.k8s_pod.pod_spec["containers"]
    return list(container["args"])


@pytest.mark.parametrize("entity", [elastic.rank_one_fails, elastic.multi_node])
def test_elastic_root_cause_tasks_run_the_patched_entrypoint(entity) -> None:
    ours = _container_args(entity)
    flytekits = _container_args(plain.add_one)
    assert ours[0] == "pyflyte-rootcause-execute"
    assert "pyflyte-execute" not in ours
    # everything else is flytekit's command line, down to the task's own resolver arguments
    assert ours[1 : ours.index("--")] == flytekits[1 : flytekits.index("--")]
    assert ours[ours.index("--") + 1 :] == [
        "task-module",
        "tests.entrypoint_tasks.elastic",
        "task-name",
        entity.name.rsplit(".", 1)[-1],
    ]


def test_fast_registration_runs_the_patched_entrypoint_under_pyflyte_fast_execute() -> None:
    args = _container_args(elastic.rank_one_fails, FAST)
    assert args[0] == "pyflyte-fast-execute"
    assert args[args.index("--") + 1] == "pyflyte-rootcause-execute"


def test_plain_tasks_keep_pyflyte_execute() -> None:
    assert _container_args(plain.add_one)[0] == "pyflyte-execute"


@pytest.mark.slow
def test_serialized_command_runs_a_real_elastic_launch_through_the_patched_entrypoint(
    file_store: ObjectStore,
) -> None:
    started_ns = time.time_ns()
    prefixes = new_prefixes(file_store, x=7)
    values = {
        "{{.input}}": prefixes.inputs,
        "{{.outputPrefix}}": prefixes.output,
        "{{.rawOutputDataPrefix}}": prefixes.raw_output,
        "{{.checkpointOutputPrefix}}": f"{prefixes.raw_output}/checkpoint",
        "{{.prevCheckpointPrefix}}": '""',
    }
    args = [values.get(arg, arg) for arg in _container_args(elastic.rank_one_fails)]
    env = pod_env(file_store, _F_WN="pytorchjob-0-worker-0")
    env["PATH"] = f"{BIN_DIR}{os.pathsep}{env.get('PATH', '')}"  # the image's PATH has the console scripts
    completed = subprocess.run(args, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=240, check=False)
    assert completed.returncode == 0, completed.stderr[-5000:]

    names = list_names(file_store, prefixes.output)
    per_worker = [name for name in names if per_worker_name_pattern("pytorchjob-0-worker-0").fullmatch(name)]
    assert len(per_worker) == 1 and sorted(names) == sorted([*per_worker, "error.pb"])
    error = read_error(file_store, f"{prefixes.output}/error.pb")
    assert error.kind == errors_pb2.ContainerError.NON_RECOVERABLE
    assert error.worker == "pytorchjob-0-worker-0"
    assert role_from_marker(error.message) == Role.CANDIDATE
    assert "bad batch 7 on rank 1" in error.message
    # the time is the worker's own record of its exception, to the nanosecond: the agent's report
    # (quoted in the message) prints that record, and the document's timestamp is the same instant
    timestamp_ns = error.timestamp.seconds * 1_000_000_000 + error.timestamp.nanos
    assert started_ns < timestamp_ns < time.time_ns()
    assert format_time(timestamp_ns) in error.message


def test_command_line_is_pyflyte_executes() -> None:
    """Same options, arguments and defaults: any pyflyte-execute command line parses unchanged."""

    def shape(command) -> list[tuple]:
        return [(p.name, tuple(p.opts), p.required, p.nargs, p.default) for p in command.params]

    assert shape(execute_task_cmd) == shape(flytekit_command)
