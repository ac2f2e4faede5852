"""Run a serialized Flyte task as an N-pod PyTorchJob on this machine.

What the training operator and propeller do for a real job, done here with plain processes:

- the container args come from flytekit's serialization of the task (so the test exercises the
  command a cluster would run, patched entrypoint included), with propeller's templates filled in;
- every pod gets ``PET_NNODES``, ``PET_NPROC_PER_NODE``, ``PET_RDZV_ENDPOINT`` (one c10d rendezvous
  on 127.0.0.1), the same execution id and its own pod name in ``FLYTE_INTERNAL_WORKER_NAME``;
- every pod writes to the same output prefix, like the pods of one task attempt;
- with ``aggregation=True`` pods also get ``FLYTE_INTERNAL_DIST_ERROR_STRATEGY``, as propeller sets
  it when ``enable-distributed-error-aggregation`` is on.

Each pod runs in its own process group so that a timeout kills it and all its workers: no test or
demo leaves a process behind.
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
from rootcause_harness.faults import FAULT_TIME_FILE, FAULT_VARIABLE, SIM_DIR_VARIABLE, Fault, ask_for_start_preemption
from rootcause_harness.loopback import free_port
from rootcause_harness.netns import POD_INTERFACE, PodNetwork
from rootcause_harness.operator import SNAPSHOT_DIR, Operator, OperatorDecision, PrefixCopier
from rootcause_harness.pods import (
    TERMINATION_GRACE_S,
    FaultGroundTruth,
    Pod,
    PodResult,
    PodWatch,
    Rescheduler,
    base_env,
    clock_env,
    read_placement,
    start_pod,
    wait_for_pods,
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


@dataclasses.dataclass(frozen=True)
class JobSpec:
    task: PythonTask
    nnodes: int
    nproc_per_node: int
    store: StoreAccess
    fault: Fault | None = None
    aggregation: bool = False
    inputs: dict[str, Any] = dataclasses.field(default_factory=dict)
    timeout_s: float = 240.0
    pod_name_prefix: str = "train-worker"
    #: a pod killed by a signal (its node lost) is created again under its name after this many
    #: seconds, as the training operator recreates a failed pod of a PyTorchJob; ``None``: never
    reschedule_lost_after_s: float | None = None
    #: SIGTERM to SIGKILL for a preempted pod (Kubernetes' default ``terminationGracePeriodSeconds``)
    termination_grace_s: float = TERMINATION_GRACE_S
    #: the pods still running this long after the operator decided are deleted, as Flyte deletes a
    #: finished PyTorchJob (``pods.PodWatch``); ``None``: they run to their own end
    delete_after_decision_s: float | None = None
    #: the pods' own network (one namespace each, a bridge; ``None``: every pod on loopback). The
    #: store must be served on its gateway address for a cut-off pod to lose it
    network: PodNetwork | None = None


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


def pod_name(spec: JobSpec, index: int) -> str:
    return f"{spec.pod_name_prefix}-{index}"


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
    names = [pod_name(spec, i) for i in range(spec.nnodes)]
    rendezvous_host = "127.0.0.1"
    if spec.network is not None:  # the store host is the first pod, on its own address
        rendezvous_host = next(spec.network.add_pod(name) for name in names[:1]).address
        for name in names[1:]:
            spec.network.add_pod(name)
    rendezvous = f"{rendezvous_host}:{free_port()}"
    env = base_env() | spec.store.pod_env() | {
        "FLYTE_INTERNAL_EXECUTION_ID": execution_id,
        "FLYTE_INTERNAL_EXECUTION_PROJECT": "rootcause",
        "FLYTE_INTERNAL_EXECUTION_DOMAIN": "development",
        "PET_NNODES": str(spec.nnodes),
        "PET_NPROC_PER_NODE": str(spec.nproc_per_node),
        "PET_RDZV_ENDPOINT": rendezvous,
        SIM_DIR_VARIABLE: str(sim_dir),
    }
    if spec.fault is not None:
        env[FAULT_VARIABLE] = spec.fault.to_env()
    if spec.aggregation:
        env["FLYTE_INTERNAL_DIST_ERROR_STRATEGY"] = "earliest"

    if spec.network is not None:
        env["GLOO_SOCKET_IFNAME"] = POD_INTERFACE

    def start(name: str, log_path: Path) -> Pod:
        pod_env = env | {"FLYTE_INTERNAL_WORKER_NAME": name} | clock_env(spec.fault, name, env)
        pod_args = args if spec.network is None else spec.network.command(name, args)
        return start_pod(pod_args, pod_env, name, log_path)

    pods = [start(name, sim_dir / f"{name}.log") for name in names]
    ask_for_start_preemption(sim_dir, spec.fault)
    rescheduler = None
    if spec.reschedule_lost_after_s is not None:
        rescheduler = Rescheduler(start, spec.reschedule_lost_after_s)
    operator = Operator(spec.store.prefix_copier(output_prefix), sim_dir / SNAPSHOT_DIR)
    watch = PodWatch(sim_dir, operator, spec.termination_grace_s, spec.delete_after_decision_s, spec.network)
    results, timed_out = wait_for_pods(pods, spec.timeout_s, watch, rescheduler)
    fault_file = sim_dir / FAULT_TIME_FILE
    return JobResult(
        spec=spec,
        execution_id=execution_id,
        output_prefix=output_prefix,
        raw_output_prefix=raw_prefix,
        sim_dir=sim_dir,
        pods=results,
        fault_ns=int(fault_file.read_text()) if fault_file.exists() else None,
        placement=read_placement(sim_dir),
        timed_out=timed_out,
        replaced=[] if rescheduler is None else rescheduler.replaced,
        operator=operator.decision,
    )


