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

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import tempfile
import time
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

from rootcause_core.timestamps import from_seconds, to_seconds
from rootcause_core.worker_names import WORKER_NAME_ENV_VARS
from rootcause_engine.simulation.faults import (
    CLOCK_OFFSET_VARIABLE,
    FAULT_TIME_FILE,
    FAULT_VARIABLE,
    FAULTY_POD_FILE,
    FROZEN_POD_FILE,
    SIM_DIR_VARIABLE,
    SKEWED_CLOCK_DIR,
    Fault,
)
from rootcause_engine.simulation.loopback import bound_dns_waits, free_port
from rootcause_engine.simulation.training_loop import RANKS_DIR

#: Variables a pod must not inherit from whoever runs the simulator: the simulator sets them.
_POD_CONTROLLED = (
    "FLYTE_INTERNAL_DIST_ERROR_STRATEGY",
    "_F_DES",
    *WORKER_NAME_ENV_VARS,
    "PET_NNODES",
    "PET_NPROC_PER_NODE",
    "PET_RDZV_ENDPOINT",
    "TORCHELASTIC_ERROR_FILE",
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
        return fsspec.filesystem(self.protocol, skip_instance_cache=True, **self.storage_options)

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


@dataclasses.dataclass(frozen=True)
class PodResult:
    name: str
    returncode: int | None
    exited_ns: int
    log_path: Path


@dataclasses.dataclass(frozen=True)
class JobResult:
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

    @property
    def injected_worker(self) -> str | None:
        """The pod the fault was injected into (ground truth: as the faulty worker recorded it, which
        resolves a store-host selector; else the fault's pod)."""
        recorded = self.sim_dir / FAULTY_POD_FILE
        if recorded.exists():
            return recorded.read_text()
        return None if self.spec.fault is None else self.spec.fault.pod

    @property
    def injected_rank(self) -> int | None:
        """The global rank the rendezvous gave the faulty worker (ground truth, from the workers)."""
        fault = self.spec.fault
        if fault is None:
            return None
        ranks = [rank for rank, where in self.placement.items() if where == (self.injected_worker, fault.local_rank)]
        return ranks[0] if ranks else None

    @property
    def fault_to_exit_s(self) -> float | None:
        """Seconds from the fault to the last pod's exit."""
        if self.fault_ns is None or not self.pods:
            return None
        return to_seconds(max(p.exited_ns for p in self.pods) - self.fault_ns)


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


def _base_env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in _POD_CONTROLLED}
    env.setdefault("PYTHONUNBUFFERED", "1")
    env["PYTHONWARNINGS"] = "ignore"
    bound_dns_waits(env)  # every peer of a simulated pod is on loopback
    return env


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)




def _clock_env(fault: Fault | None, pod: str, env: dict[str, str]) -> dict[str, str]:
    """For the faulty pod of a fault with a clock offset: the variables that skew its wall clock."""
    if fault is None or not fault.clock_offset_s or pod != fault.pod:
        return {}
    path = os.pathsep.join(p for p in (str(SKEWED_CLOCK_DIR), env.get("PYTHONPATH", "")) if p)
    return {CLOCK_OFFSET_VARIABLE: str(from_seconds(fault.clock_offset_s)), "PYTHONPATH": path}


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
    rendezvous = f"127.0.0.1:{free_port()}"
    env = _base_env() | spec.store.pod_env() | {
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

    def start_pod(name: str, log_path: Path) -> _Pod:
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                args,
                env=env | {"FLYTE_INTERNAL_WORKER_NAME": name} | _clock_env(spec.fault, name, env),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return name, proc, log_path

    pods = [start_pod(name, sim_dir / f"{name}.log") for name in (pod_name(spec, i) for i in range(spec.nnodes))]
    rescheduler = None
    if spec.reschedule_lost_after_s is not None:
        rescheduler = _Rescheduler(start_pod, spec.reschedule_lost_after_s)
    results, timed_out = _wait_for_pods(pods, spec.timeout_s, sim_dir / FROZEN_POD_FILE, rescheduler)
    fault_file = sim_dir / FAULT_TIME_FILE
    ranks_dir = sim_dir / RANKS_DIR
    placement = {}
    if ranks_dir.exists():
        for path in ranks_dir.iterdir():
            pod, _, local = path.read_text().partition("\n")
            placement[int(path.name)] = (pod, int(local))
    return JobResult(
        spec=spec,
        execution_id=execution_id,
        output_prefix=output_prefix,
        raw_output_prefix=raw_prefix,
        sim_dir=sim_dir,
        pods=results,
        fault_ns=int(fault_file.read_text()) if fault_file.exists() else None,
        placement=placement,
        timed_out=timed_out,
        replaced=[] if rescheduler is None else rescheduler.replaced,
    )


_Pod = tuple[str, "subprocess.Popen[bytes]", Path]


class _Rescheduler:
    """Creates a lost pod again, under its name, some seconds after it died (what the training
    operator does for a PyTorchJob's failed pod); each pod once. Its log goes to ``<name>.rescheduled.log``."""

    def __init__(self, start_pod: Any, after_s: float) -> None:
        self.start_pod = start_pod
        self.after_s = after_s
        self.replaced: list[PodResult] = []
        self._due: dict[str, float] = {}

    def lost(self, result: PodResult) -> None:
        """A pod ended; one killed by a signal (not yet rescheduled) is due again after ``after_s``."""
        rescheduled = any(r.name == result.name for r in self.replaced)
        if result.returncode is not None and result.returncode < 0 and not rescheduled:
            self.replaced.append(result)
            self._due[result.name] = time.monotonic() + self.after_s

    def due(self) -> list[_Pod]:
        """The pods whose time has come, started now."""
        ready = [name for name, at in self._due.items() if time.monotonic() >= at]
        started = []
        for name in ready:
            del self._due[name]
            log_path = next(r.log_path for r in self.replaced if r.name == name)
            started.append(self.start_pod(name, log_path.with_suffix(".rescheduled.log")))
        return started

    @property
    def pending(self) -> bool:
        return bool(self._due)


def _wait_for_pods(
    pods: list[_Pod], timeout_s: float, frozen_file: Path, rescheduler: _Rescheduler | None = None
) -> tuple[list[PodResult], bool]:
    """Wait for every pod to exit, but a frozen one (``frozen_file`` names it), which never will:
    it is deleted once the others are done, as Kubernetes deletes the pods of a finished job. With a
    ``rescheduler``, a lost pod is replaced by a new one under its name, which is waited for instead."""
    deadline = time.monotonic() + timeout_s
    exited: dict[str, PodResult] = {}
    timed_out = False
    lost_procs: list[subprocess.Popen[bytes]] = []
    while len(exited) < len(pods) - (1 if frozen_file.exists() else 0) or (rescheduler and rescheduler.pending):
        for name, proc, log_path in pods:
            if name not in exited and proc.poll() is not None:
                exited[name] = PodResult(name, proc.returncode, time.time_ns(), log_path)
                if rescheduler is not None:
                    rescheduler.lost(exited[name])
        for new_pod in rescheduler.due() if rescheduler is not None else ():
            index = next(i for i, pod in enumerate(pods) if pod[0] == new_pod[0])
            lost_procs.append(pods[index][1])
            pods[index] = new_pod
            del exited[new_pod[0]]
        if time.monotonic() > deadline:
            timed_out = True
            break
        time.sleep(0.02)
    for proc in lost_procs:
        _kill_group(proc)
    for name, proc, log_path in pods:
        _kill_group(proc)  # the pod's workers too, whatever state they are in
        if name not in exited:
            proc.wait()
            exited[name] = PodResult(name, None, time.time_ns(), log_path)
    return [exited[name] for name, _, _ in pods], timed_out
