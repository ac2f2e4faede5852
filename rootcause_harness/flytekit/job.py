"""Run a serialized Flyte task as an N-pod PyTorchJob on this machine: the flytekit flavour's layout.

What propeller does for a real job, done here; the pods themselves are run by the shared
:func:`rootcause_harness.job.run_pods` (the training operator's part):

- the container args come from flytekit's serialization of the task (so the test exercises the
  command a cluster would run, patched entrypoint included), with propeller's templates filled in;
- the inputs are a serialized ``LiteralMap`` in the job's store (a local folder or an object store);
- every pod gets the same execution id and writes to the same output prefix, like the pods of one
  task attempt;
- with ``aggregation=True`` pods also get ``FLYTE_INTERNAL_DIST_ERROR_STRATEGY``, as propeller sets
  it when ``enable-distributed-error-aggregation`` is on.
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile
import uuid
from collections import OrderedDict
from pathlib import Path
from typing import Any

import fsspec
from flytekit.configuration import Image, ImageConfig, SerializationSettings
from flytekit.core.base_task import PythonTask
from flytekit.core.context_manager import FlyteContextManager
from flytekit.core.type_engine import TypeEngine
from flytekit.models.task import TaskTemplate
from flytekit.tools.translator import get_serializable

from backend_reader.filesystems import filesystem
from rootcause_harness.job import JobShape, run_pods
from rootcause_harness.operator import Operator, OperatorDecision, PrefixCopier
from rootcause_harness.pods import (
    FaultGroundTruth,
    PodResult,
)


@dataclasses.dataclass(frozen=True)
class StoreAccess:
    """Where a job's prefixes live and how its pods reach that store."""

    root: str
    storage_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    env: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def protocol(self) -> str:
        return self.root.split("://", 1)[0] if "://" in self.root else "file"

    def filesystem(self) -> fsspec.AbstractFileSystem:
        return filesystem(self.protocol, skip_instance_cache=True, **self.storage_options)

    def prefix_copier(self, prefix: str) -> PrefixCopier:
        """Copies the files directly under ``prefix`` into a local folder (the operator's snapshot)."""

        def copy(into: Path) -> None:
            fs = self.filesystem()
            try:
                entries = fs.ls(prefix.rstrip("/"), detail=True)
            except FileNotFoundError:
                return
            for entry in entries:
                if entry.get("type") != "file":
                    continue
                try:
                    data = fs.cat_file(entry["name"])
                except FileNotFoundError:  # replaced meanwhile
                    continue
                (into / entry["name"].rstrip("/").rsplit("/", 1)[-1]).write_bytes(data)

        return copy

    def pod_env(self) -> dict[str, str]:
        """Variables a pod needs: the store's own, plus flytekit's S3 settings for an s3 store."""
        env = dict(self.env)
        if self.protocol == "s3":
            options = self.storage_options
            env.update(
                FLYTE_AWS_ENDPOINT=str(options.get("endpoint_url", "")),
                FLYTE_AWS_ACCESS_KEY_ID=str(options.get("key", "")),
                FLYTE_AWS_SECRET_ACCESS_KEY=str(options.get("secret", "")),
            )
        return env


@dataclasses.dataclass(frozen=True, kw_only=True)
class JobSpec(JobShape):
    """A flytekit task's job: the task, the store its prefixes live in, and propeller's settings."""

    task: PythonTask
    store: StoreAccess
    #: propeller's ``enable-distributed-error-aggregation`` (``FLYTE_INTERNAL_DIST_ERROR_STRATEGY``)
    aggregation: bool = False
    inputs: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class JobResult(FaultGroundTruth):
    spec: JobSpec
    execution_id: str
    output_prefix: str
    raw_output_prefix: str
    sim_dir: Path
    pods: list[PodResult]
    fault_ns: int | None
    placement: dict[int, tuple[str, int]]  # global rank -> (pod, local rank), as workers recorded
    timed_out: bool
    replaced: list[PodResult] = dataclasses.field(default_factory=list)  # pods lost, then rescheduled
    #: the training operator's decision at the first reported pod exit, with the prefix as it was then
    operator: OperatorDecision = dataclasses.field(default_factory=lambda: Operator.never())




def serialize(task: PythonTask) -> TaskTemplate:
    """The task template flytekit registers for ``task`` (what ``pyflyte package`` produces)."""
    settings = SerializationSettings(
        project="rootcause",
        domain="development",
        version="simulated",
        image_config=ImageConfig(default_image=Image(name="default", fqn="flytekitplugins-rootcause", tag="local")),
    )
    return get_serializable(OrderedDict(), settings, task).template


def container_args(template: TaskTemplate) -> list[str]:
    """The container's args: a plain container, or the primary container of the pod spec (kfpytorch
    turns tasks with a shared-memory volume into pod tasks)."""
    if template.container is not None:
        return list(template.container.args)
    primary = template.config["primary_container_name"]
    [container] = [c for c in template.k8s_pod.pod_spec["containers"] if c["name"] == primary]
    return list(container["args"])


def fill_templates(args: list[str], values: dict[str, str]) -> list[str]:
    """Replace propeller's ``{{.input}}``-style templates in the container args."""
    return [values.get(arg, arg) for arg in args]


def write_inputs(task: PythonTask, inputs: dict[str, Any], store: StoreAccess, path: str) -> None:
    """Write ``inputs.pb`` as propeller does: the task's inputs as a serialized ``LiteralMap``."""
    ctx = FlyteContextManager.current_context()
    literal_map = TypeEngine.dict_to_literal_map(ctx, inputs, task.python_interface.inputs)
    fs = store.filesystem()
    if store.protocol == "file":
        fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    fs.pipe_file(path, literal_map.to_flyte_idl().SerializeToString())


def pod_name(spec: JobShape, index: int) -> str:
    return spec.pod_names()[index]


def run_job(spec: JobSpec, work_dir: Path | None = None) -> JobResult:
    """Start the pods, wait for all of them (or the timeout), and collect what happened."""
    execution_id = f"sim{uuid.uuid4().hex[:10]}"
    base = f"{spec.store.root}/{execution_id}"
    output_prefix, raw_prefix = f"{base}/data/0", f"{base}/raw"
    inputs_path = f"{base}/inputs.pb"
    sim_dir = Path(work_dir or tempfile.mkdtemp(prefix="rootcause-sim-")) / execution_id
    sim_dir.mkdir(parents=True, exist_ok=True)
    write_inputs(spec.task, spec.inputs, spec.store, inputs_path)
    if spec.store.protocol == "file":
        spec.store.filesystem().makedirs(output_prefix, exist_ok=True)

    args = fill_templates(
        container_args(serialize(spec.task)),
        {
            "{{.input}}": inputs_path,
            "{{.outputPrefix}}": output_prefix,
            "{{.rawOutputDataPrefix}}": raw_prefix,
            "{{.checkpointOutputPrefix}}": f"{base}/checkpoint",
            "{{.prevCheckpointPrefix}}": "",
        },
    )
    args[0] = str(Path(sys.executable).with_name(args[0]))  # the image's console script
    env = spec.store.pod_env() | {
        "FLYTE_INTERNAL_EXECUTION_ID": execution_id,
        "FLYTE_INTERNAL_EXECUTION_PROJECT": "rootcause",
        "FLYTE_INTERNAL_EXECUTION_DOMAIN": "development",
    }
    if spec.aggregation:
        env["FLYTE_INTERNAL_DIST_ERROR_STRATEGY"] = "earliest"
    run = run_pods(spec, args=args, env=env, sim_dir=sim_dir, copy_prefix=spec.store.prefix_copier(output_prefix))
    return JobResult(
        spec=spec,
        execution_id=execution_id,
        output_prefix=output_prefix,
        raw_output_prefix=raw_prefix,
        sim_dir=sim_dir,
        **run.fields(),
    )


