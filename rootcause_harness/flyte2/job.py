"""Run a Flyte 2 task as an N-pod PyTorchJob on this machine, each pod the real ``a0``: the Flyte 2 layout.

What the backend does for a real action, done here; the pods themselves are run by the shared
:func:`rootcause_harness.job.run_pods` (the training operator's part):

- the container args are the task's own (``TaskTemplate.container_args``, what ``flyte deploy``
  registers), with the backend's templates (``{{.input}}``, ``{{.outputPrefix}}``, run and action
  name...) filled in; the inputs file is flyteidl2's ``Inputs``;
- every pod gets the same run and action and writes to the same output prefix, like the pods of one
  action: ``error.pb`` is the last writer's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

from flyte._internal.runtime.convert import convert_from_native_to_inputs
from flyte._task import TaskTemplate
from flyte.models import SerializationContext
from flyteidl2.core import execution_pb2
from flyteidl2.task import common_pb2
from google.protobuf.message import DecodeError

from rootcause_harness.job import JobShape, run_pods
from rootcause_harness.operator import Operator, OperatorDecision, copy_local_prefix
from rootcause_harness.pods import (
    FaultGroundTruth,
    PodResult,
)

#: The org, project and domain the simulated action runs in (``a0`` requires them).
ORG, PROJECT, DOMAIN = "local", "rootcause", "development"
#: The action's name, as the backend names a run's first action.
ACTION = "a0"
#: Where the task's module is importable from: the repository root (the image's working directory).
ROOT_DIR = Path(__file__).resolve().parents[2]


@dataclasses.dataclass(frozen=True, kw_only=True)
class JobSpec(JobShape):
    """A Flyte 2 task's job: the task and the local folder used as its bucket."""

    task: TaskTemplate
    #: a local folder used as the bucket
    root: Path
    #: the task's inputs by name (the others take their defaults), as ``flyte run`` passes them
    inputs: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class JobResult(FaultGroundTruth):
    spec: JobSpec
    run_name: str
    output_prefix: Path
    sim_dir: Path
    pods: list[PodResult]
    fault_ns: int | None
    placement: dict[int, tuple[str, int]]  # global rank -> (pod, local rank), as workers recorded
    timed_out: bool
    #: the training operator's decision at the first reported pod exit, with the prefix as it was then
    operator: OperatorDecision = dataclasses.field(default_factory=lambda: Operator.never())
    replaced: list[PodResult] = dataclasses.field(default_factory=list)  # pods lost, then rescheduled

    @property
    def error_pb(self) -> str:
        """``written``, ``missing`` (no pod wrote one) or ``torn`` (unreadable: pods wrote different
        bytes to the one local file at once; an object store's put replaces the whole object)."""
        path = self.output_prefix / "error.pb"
        if not path.exists():
            return "missing"
        try:
            execution_pb2.ErrorDocument().ParseFromString(path.read_bytes())
        except DecodeError:
            return "torn"
        return "written"

    @property
    def output(self) -> float | None:
        """The task's float output (``o0``), as rank 0's pod wrote it; ``None`` when none was written."""
        path = self.output_prefix / "outputs.pb"
        if not path.exists():
            return None
        outputs = common_pb2.Outputs()
        outputs.ParseFromString(path.read_bytes())
        values = {named.name: named.value for named in outputs.literals}
        return values["o0"].scalar.primitive.float_value if "o0" in values else None

    @property
    def error_document(self) -> execution_pb2.ErrorDocument | None:
        """The action's ``error.pb`` (what the backend reads); ``None`` when it is missing or torn."""
        if self.error_pb != "written":
            return None
        document = execution_pb2.ErrorDocument()
        document.ParseFromString((self.output_prefix / "error.pb").read_bytes())
        return document


def container_args(task: TaskTemplate, values: dict[str, str]) -> list[str]:
    """The task's container args with the backend's templates replaced by ``values``."""
    args = task.container_args(SerializationContext(version="simulated", root_dir=ROOT_DIR))
    return [values.get(arg, arg) for arg in args]


def inputs_of(spec: JobSpec) -> common_pb2.Inputs:
    """The action's ``inputs.pb``: ``spec.inputs`` converted as Flyte 2 converts a run's arguments."""
    if not spec.inputs:
        return common_pb2.Inputs()
    converted = asyncio.run(convert_from_native_to_inputs(spec.task.native_interface, **spec.inputs))
    return converted.proto_inputs


def run_job(spec: JobSpec, work_dir: Path | None = None) -> JobResult:
    """Start the pods, wait for all of them (or the timeout), and collect what happened."""
    run_name = f"sim{uuid.uuid4().hex[:10]}"
    base = spec.root.resolve() / run_name
    output_prefix = base / "data" / ACTION
    sim_dir = Path(work_dir or tempfile.mkdtemp(prefix="rootcause-sim-")) / run_name
    for folder in (output_prefix, sim_dir, base / "raw"):
        folder.mkdir(parents=True, exist_ok=True)
    inputs = base / "inputs.pb"
    inputs.write_bytes(inputs_of(spec).SerializeToString())
    args = container_args(
        spec.task,
        {
            "{{.input}}": str(inputs),
            "{{.outputPrefix}}": str(output_prefix),
            "{{.rawOutputDataPrefix}}": str(base / "raw"),
            "{{.checkpointOutputPrefix}}": str(base / "checkpoint"),
            "{{.prevCheckpointPrefix}}": "",
            "{{.runName}}": run_name,
            "{{.actionName}}": ACTION,
            "{{.runStartTime}}": "",
        },
    )
    args[0] = str(Path(sys.executable).with_name(args[0]))  # the image's console script
    env = {
        "_U_ORG_NAME": ORG,
        "FLYTE_INTERNAL_EXECUTION_PROJECT": PROJECT,
        "FLYTE_INTERNAL_EXECUTION_DOMAIN": DOMAIN,
        "_U_RUN_BASE": str(base),
    }
    run = run_pods(spec, args=args, env=env, sim_dir=sim_dir, copy_prefix=copy_local_prefix(output_prefix))
    return JobResult(
        spec=spec,
        run_name=run_name,
        output_prefix=output_prefix,
        sim_dir=sim_dir,
        **run.fields(),
    )
