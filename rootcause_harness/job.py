"""One simulated PyTorchJob, whichever flavour's pods run in it: the shape of the job and the run of its pods.

Both flavours' simulators (``flytekit/job.py``: ``pyflyte-rootcause-execute`` pods; ``flyte2/job.py``:
``a0`` pods) lay out their own prefixes, inputs, container args and backend variables, then hand the
pods to :func:`run_pods`, which does what the training operator and Kubernetes do for every job:

- names the pods, puts them on loopback or on a :class:`~.netns.PodNetwork` (the first pod then hosts
  the rendezvous store on its own address), and gives every pod ``PET_NNODES``,
  ``PET_NPROC_PER_NODE``, ``PET_RDZV_ENDPOINT``, its name in ``FLYTE_INTERNAL_WORKER_NAME``, and the
  fault to inject;
- starts each pod in its own session (a timeout kills it with all its workers: no test or demo
  leaves a process behind), stops one at its start if the fault says so;
- watches them (``pods.PodWatch``: the operator's decision at the first reported exit, preemption,
  silent nodes, deletion after the decision, a lost pod rescheduled) until every pod exited or the
  timeout, and collects the ground truth the workers left.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path

from rootcause_harness.faults import FAULT_TIME_FILE, FAULT_VARIABLE, SIM_DIR_VARIABLE, Fault, ask_for_start_preemption
from rootcause_harness.loopback import free_port
from rootcause_harness.netns import POD_INTERFACE, PodNetwork
from rootcause_harness.operator import SNAPSHOT_DIR, Operator, OperatorDecision, PrefixCopier
from rootcause_harness.pods import (
    TERMINATION_GRACE_S,
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


@dataclasses.dataclass(frozen=True, kw_only=True)
class JobShape:
    """What every simulated job has, whichever flavour: its pods, its fault and its clock."""

    nnodes: int
    nproc_per_node: int
    fault: Fault | None = None
    timeout_s: float = 240.0
    pod_name_prefix: str = "train-worker"
    #: SIGTERM to SIGKILL for a preempted pod (Kubernetes' default ``terminationGracePeriodSeconds``)
    termination_grace_s: float = TERMINATION_GRACE_S
    #: the pods still running this long after the operator decided are deleted, as Flyte deletes a
    #: finished PyTorchJob (``pods.PodWatch``); ``None``: they run to their own end
    delete_after_decision_s: float | None = None
    #: the pods' own network (one namespace each, a bridge; ``None``: every pod on loopback). The
    #: object store must be served on its gateway address for a cut-off pod to lose it
    network: PodNetwork | None = None
    #: a pod killed by a signal (its node lost) is created again under its name after this many
    #: seconds, as the training operator recreates a failed pod of a PyTorchJob; ``None``: never
    reschedule_lost_after_s: float | None = None
    #: variables of one pod's own, by pod name, on top of everything else (``benchmarks/chaos_soak.py``:
    #: the steps of one pod's wall clock); none by default
    extra_pod_env: Mapping[str, Mapping[str, str]] = dataclasses.field(default_factory=dict)
    #: each pod's command line wrapped, ``(name, args) -> args`` (the chaos soak: a pod in a pid
    #: namespace of its own); ``None``: as is
    pod_wrapper: Callable[[str, list[str]], list[str]] | None = None
    #: called once every pod started, with each pod's name and main process id (the chaos soak
    #: signals and inspects the pods while the job runs); ``None``: nobody is told
    on_pods_started: Callable[[list[tuple[str, int]]], None] | None = None

    def pod_names(self) -> list[str]:
        return [f"{self.pod_name_prefix}-{index}" for index in range(self.nnodes)]


@dataclasses.dataclass(frozen=True)
class PodsRun:
    """What happened to a job's pods."""

    pods: list[PodResult]
    timed_out: bool
    #: the training operator's decision at the first reported pod exit, with the prefix as it was then
    operator: OperatorDecision
    fault_ns: int | None
    placement: dict[int, tuple[str, int]]  # global rank -> (pod, local rank), as workers recorded
    replaced: list[PodResult]  # pods lost, then rescheduled

    def fields(self) -> dict[str, object]:
        """Its fields by name, for a flavour's job result (which carries them all)."""
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}


def run_pods(shape: JobShape, *, args: list[str], env: dict[str, str], sim_dir: Path,
             copy_prefix: PrefixCopier) -> PodsRun:
    """Run ``args`` as each pod of ``shape`` with the flavour's ``env`` (see the module docstring);
    ``copy_prefix`` copies the output prefix into the operator's snapshot at its decision."""
    names = shape.pod_names()
    rendezvous_host = "127.0.0.1"
    if shape.network is not None:  # the store host is the first pod, on its own address
        hosts = [shape.network.add_pod(name) for name in names]
        rendezvous_host = hosts[0].address
    pod_env = base_env() | env | {
        "PET_NNODES": str(shape.nnodes),
        "PET_NPROC_PER_NODE": str(shape.nproc_per_node),
        "PET_RDZV_ENDPOINT": f"{rendezvous_host}:{free_port()}",
        SIM_DIR_VARIABLE: str(sim_dir),
    }
    if shape.fault is not None:
        pod_env[FAULT_VARIABLE] = shape.fault.to_env()
    if shape.network is not None:
        pod_env["GLOO_SOCKET_IFNAME"] = POD_INTERFACE
        pod_env |= shape.network.api_env()

    def start(name: str, log_path: Path) -> Pod:
        own_env = pod_env | {"FLYTE_INTERNAL_WORKER_NAME": name} | clock_env(shape.fault, name, pod_env)
        own_env |= shape.extra_pod_env.get(name, {})
        own_args = args if shape.network is None else shape.network.command(name, args)
        if shape.pod_wrapper is not None:
            own_args = shape.pod_wrapper(name, own_args)
        return start_pod(own_args, own_env, name, log_path)

    pods = [start(name, sim_dir / f"{name}.log") for name in names]
    if shape.on_pods_started is not None:
        shape.on_pods_started([(name, proc.pid) for name, proc, _ in pods])
    ask_for_start_preemption(sim_dir, shape.fault)
    rescheduler = None
    if shape.reschedule_lost_after_s is not None:
        rescheduler = Rescheduler(start, shape.reschedule_lost_after_s)
    operator = Operator(copy_prefix, sim_dir / SNAPSHOT_DIR)
    watch = PodWatch(sim_dir, operator, shape.termination_grace_s, shape.delete_after_decision_s, shape.network)
    results, timed_out = wait_for_pods(pods, shape.timeout_s, watch, rescheduler)
    fault_file = sim_dir / FAULT_TIME_FILE
    return PodsRun(
        pods=results,
        timed_out=timed_out,
        operator=operator.decision,
        fault_ns=int(fault_file.read_text()) if fault_file.exists() else None,
        placement=read_placement(sim_dir),
        replaced=[] if rescheduler is None else rescheduler.replaced,
    )
