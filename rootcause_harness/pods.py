"""Pods of a simulated job as plain processes: their environment, waiting for them, ending them.

Flyte-free, shared by both flavours' simulators: each starts its pods with its own entrypoint
(flytekit's ``pyflyte-rootcause-execute``, Flyte 2's ``a0``) and its own variables; how a pod is
started as its own session, waited for, rescheduled when lost and killed with every process it
started is the same. Also the ground truth the workers leave (which pod and rank a fault hit).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rootcause_core.timestamps import from_seconds, to_seconds
from rootcause_core.worker_names import WORKER_NAME_ENV_VARS
from rootcause_harness.faults import (
    CLOCK_OFFSET_VARIABLE,
    ENTRYPOINT_WAIT_S,
    FAULT_TIME_FILE,
    FAULTY_POD_FILE,
    FROZEN_POD_FILE,
    LINK_CUT_PREFIX,
    LOST_NODE_FILE,
    PARTITION_REQUEST_FILE,
    PARTITIONED_POD_FILE,
    PREEMPT_REQUEST_FILE,
    SKEWED_CLOCK_DIR,
    Fault,
    PreemptRequest,
    record_fault_time,
)
from rootcause_harness.loopback import bound_dns_waits
from rootcause_harness.netns import PodNetwork
from rootcause_harness.operator import Operator
from rootcause_harness.training_loop import RANKS_DIR

#: Variables a pod must not inherit from whoever runs the simulator: the simulator sets them.
POD_CONTROLLED = (
    "FLYTE_INTERNAL_DIST_ERROR_STRATEGY",
    "_F_DES",
    *WORKER_NAME_ENV_VARS,
    "PET_NNODES",
    "PET_NPROC_PER_NODE",
    "PET_RDZV_ENDPOINT",
    "TORCHELASTIC_ERROR_FILE",
)


#: Kubernetes' default ``terminationGracePeriodSeconds``: SIGTERM, then SIGKILL this much later.
TERMINATION_GRACE_S = 30.0
#: How often the simulator looks at its pods: an exit is seen (and the operator decides) within this.
POLL_S = 0.005


@dataclasses.dataclass(frozen=True)
class PodResult:
    name: str
    returncode: int | None
    exited_ns: int
    log_path: Path


def base_env() -> dict[str, str]:
    """This process's environment for a pod: without what the simulator sets per pod, unbuffered,
    warnings off, DNS waits bounded."""
    env = {key: value for key, value in os.environ.items() if key not in POD_CONTROLLED}
    env.setdefault("PYTHONUNBUFFERED", "1")
    env["PYTHONWARNINGS"] = "ignore"
    bound_dns_waits(env)  # every peer of a simulated pod is on loopback
    return env


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL a pod and every process of its session (its agent and workers)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def clock_env(fault: Fault | None, pod: str, env: dict[str, str]) -> dict[str, str]:
    """For the faulty pod of a fault with a clock offset: the variables that skew its wall clock."""
    if fault is None or not fault.clock_offset_s or pod != fault.pod:
        return {}
    path = os.pathsep.join(p for p in (str(SKEWED_CLOCK_DIR), env.get("PYTHONPATH", "")) if p)
    return {CLOCK_OFFSET_VARIABLE: str(from_seconds(fault.clock_offset_s)), "PYTHONPATH": path}


Pod = tuple[str, "subprocess.Popen[bytes]", Path]


class Rescheduler:
    """Creates a lost pod again, under its name, some seconds after it died (what the training
    operator does for a PyTorchJob's failed pod); each pod once. Its log goes to ``<name>.rescheduled.log``."""

    def __init__(self, start_pod: PodStarter, after_s: float) -> None:
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

    def due(self) -> list[Pod]:
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


@dataclasses.dataclass
class _Preemption:
    """A pod the kubelet is stopping: SIGTERM to its main process now, SIGKILL to all of it later."""

    name: str
    kill_at: float


class PodWatch:
    """What the simulator does while the pods run, as Kubernetes and the training operator would.

    - A pod's main process is its container's first process: when it exits, the container ends and
      every process left in it is killed.
    - A pod asked to be preempted (a worker wrote a :class:`~.faults.PreemptRequest`, as a spot
      reclaim, a drain or an eviction would strike it) gets SIGTERM on its main process when the
      request is due, as the kubelet sends it, and SIGKILL on every process ``grace_s`` later if
      still running.
    - A frozen pod (:data:`~.faults.FROZEN_POD_FILE`) never exits: it is not waited for, and deleted
      once the others are done. A pod on a lost node (:data:`~.faults.LOST_NODE_FILE`) and a frozen
      one are *silent*: their kubelet reports nothing, so the operator does not count their exits.
    - The :class:`~.operator.Operator` hears every other exit the moment it is seen.
    - With ``delete_after_decision_s``, the pods still running that long after the operator decided
      are deleted as Flyte deletes a finished PyTorchJob (SIGTERM, SIGKILL after the grace); without
      it they run to their own end, so what they write afterwards can be judged too.
    """

    def __init__(self, sim_dir: Path, operator: Operator | None = None, grace_s: float = TERMINATION_GRACE_S,
                 delete_after_decision_s: float | None = None, network: PodNetwork | None = None) -> None:
        self.sim_dir = sim_dir
        self.operator = operator
        self.grace_s = grace_s
        self.delete_after_decision_s = delete_after_decision_s
        self.network = network
        self._preempting: dict[str, _Preemption] = {}

    def silent(self, name: str) -> bool:
        """The pod's node went silent: lost (every process SIGKILLed at once), frozen, or cut off."""
        return name in {_read_name(self.sim_dir / marker) for marker in (FROZEN_POD_FILE, LOST_NODE_FILE,
                                                                          PARTITIONED_POD_FILE)}

    @property
    def frozen(self) -> bool:
        return (self.sim_dir / FROZEN_POD_FILE).exists()

    def exited(self, result: PodResult, proc: subprocess.Popen[bytes]) -> None:
        kill_group(proc)  # the container ends with its first process
        self._preempting.pop(result.name, None)
        if self.operator is not None and result.returncode is not None:
            self.operator.pod_exited(result.name, result.returncode, reported=not self.silent(result.name))

    def preempt_due(self, pods: list[Pod]) -> None:
        """SIGTERM a pod whose preemption was asked for and is due; SIGKILL one whose grace ran out."""
        request = PreemptRequest.read(self.sim_dir)
        if request is not None and request.after_entrypoint_s is not None:
            request = self._once_entrypoint_runs(request, pods)
        if request is not None and time.time() >= request.due_s:
            (self.sim_dir / PREEMPT_REQUEST_FILE).unlink(missing_ok=True)
            if not (self.sim_dir / FAULT_TIME_FILE).exists():  # a stop at the pod's start is the fault itself
                record_fault_time(self.sim_dir / FAULT_TIME_FILE)
            self._stop([pod for pod in pods if pod[0] == request.pod], request.signals)
        if self._deletion_due():
            self._stop(pods, 1)
        self._partition_due()
        for name, proc, _ in pods:
            preemption = self._preempting.get(name)
            if preemption is not None and time.monotonic() >= preemption.kill_at:
                kill_group(proc)
                del self._preempting[name]


    def _once_entrypoint_runs(self, request: PreemptRequest, pods: list[Pod]) -> PreemptRequest | None:
        """A stop at the pod's start, made due once its main process handles SIGTERM (or it waited
        :data:`~.faults.ENTRYPOINT_WAIT_S`); ``None`` while it is not due yet."""
        assert request.after_entrypoint_s is not None
        main = next((proc for name, proc, _ in pods if name == request.pod), None)
        if main is not None and not _handles_sigterm(main.pid) and time.time() < request.due_s + ENTRYPOINT_WAIT_S:
            return None
        due = dataclasses.replace(request, due_s=time.time() + request.after_entrypoint_s, after_entrypoint_s=None)
        due.write(self.sim_dir)
        return due

    def _stop(self, pods: list[Pod], signals: int) -> None:
        """What the kubelet does to stop a pod: SIGTERM its main process now, SIGKILL it after the grace."""
        for name, proc, _ in pods:
            if proc.poll() is None and name not in self._preempting:
                for _ in range(signals):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(proc.pid, signal.SIGTERM)
                self._preempting[name] = _Preemption(name, time.monotonic() + self.grace_s)

    def _partition_due(self) -> None:
        """Cut off the pod a worker asked for (:data:`~.faults.PARTITION_REQUEST_FILE`), once."""
        pod = _read_name(self.sim_dir / PARTITION_REQUEST_FILE)
        if pod is None:
            return
        (self.sim_dir / PARTITION_REQUEST_FILE).unlink(missing_ok=True)
        if self.network is None:
            raise RuntimeError("a partition fault needs the job on a PodNetwork (rootcause_harness.netns)")
        if pod.startswith(LINK_CUT_PREFIX):  # its node and kubelet live on: its exit is reported
            self.network.cut_links(pod.removeprefix(LINK_CUT_PREFIX))
            return
        self.network.cut(pod)
        (self.sim_dir / PARTITIONED_POD_FILE).write_text(pod)

    def _deletion_due(self) -> bool:
        if self.delete_after_decision_s is None or self.operator is None:
            return False
        decision = self.operator.decision
        if decision.decided_ns is None:
            return False
        return time.time_ns() >= decision.decided_ns + int(self.delete_after_decision_s * 1e9)


def _read_name(path: Path) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


def wait_for_pods(
    pods: list[Pod], timeout_s: float, watch: PodWatch, rescheduler: Rescheduler | None = None
) -> tuple[list[PodResult], bool]:
    """Wait for every pod to exit, but a frozen one, which never will: it is deleted once the others
    are done, as Kubernetes deletes the pods of a finished job (:class:`PodWatch` says what happens
    meanwhile). With a ``rescheduler``, a lost pod is replaced by a new one under its name, which is
    waited for instead."""
    deadline = time.monotonic() + timeout_s
    exited: dict[str, PodResult] = {}
    timed_out = False
    lost_procs: list[subprocess.Popen[bytes]] = []
    while len(exited) < len(pods) - (1 if watch.frozen else 0) or (rescheduler and rescheduler.pending):
        for name, proc, log_path in pods:
            if name not in exited and proc.poll() is not None:
                exited[name] = PodResult(name, proc.returncode, time.time_ns(), log_path)
                watch.exited(exited[name], proc)
                if rescheduler is not None:
                    rescheduler.lost(exited[name])
        watch.preempt_due(pods)
        for new_pod in rescheduler.due() if rescheduler is not None else ():
            index = next(i for i, pod in enumerate(pods) if pod[0] == new_pod[0])
            lost_procs.append(pods[index][1])
            pods[index] = new_pod
            del exited[new_pod[0]]
        if time.monotonic() > deadline:
            timed_out = True
            break
        time.sleep(POLL_S)
    for proc in lost_procs:
        kill_group(proc)
    for name, proc, log_path in pods:
        kill_group(proc)  # the pod's workers too, whatever state they are in
        if name not in exited:
            proc.wait()
            exited[name] = PodResult(name, None, time.time_ns(), log_path)
    return [exited[name] for name, _, _ in pods], timed_out


def start_pod(args: list[str], env: dict[str, str], name: str, log_path: Path) -> Pod:
    """Start one pod (its own session, so it can be killed whole) with its output in ``log_path``."""
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return name, proc, log_path


def read_placement(sim_dir: Path) -> dict[int, tuple[str, int]]:
    """Global rank -> (pod, local rank), as the workers recorded it (``training_loop``)."""
    ranks_dir = sim_dir / RANKS_DIR
    placement = {}
    if ranks_dir.exists():
        for path in ranks_dir.iterdir():
            pod, _, local = path.read_text().partition("\n")
            placement[int(path.name)] = (pod, int(local))
    return placement


def injected_worker(sim_dir: Path, fault: Fault | None) -> str | None:
    """The pod the fault was injected into (as the faulty worker recorded it, which resolves a
    store-host selector; else the fault's pod)."""
    recorded = sim_dir / FAULTY_POD_FILE
    if recorded.exists():
        return recorded.read_text()
    return None if fault is None else fault.pod


def injected_rank(sim_dir: Path, fault: Fault | None, placement: dict[int, tuple[str, int]]) -> int | None:
    """The global rank the rendezvous gave the faulty worker (ground truth, from the workers)."""
    if fault is None:
        return None
    where = (injected_worker(sim_dir, fault), fault.local_rank)
    ranks = [rank for rank, placed in placement.items() if placed == where]
    return ranks[0] if ranks else None


class FaultGroundTruth:
    """What a simulated job's result knows of its fault, from what the workers left (a mixin of each
    simulator's ``JobResult``: it has ``spec.fault``, ``sim_dir``, ``placement``, ``pods``, ``fault_ns``)."""

    spec: Any
    sim_dir: Path
    placement: dict[int, tuple[str, int]]
    pods: list[PodResult]
    fault_ns: int | None

    @property
    def injected_worker(self) -> str | None:
        """The pod the fault was injected into (ground truth, as the faulty worker recorded it)."""
        return injected_worker(self.sim_dir, self.spec.fault)

    @property
    def injected_rank(self) -> int | None:
        """The global rank the rendezvous gave the faulty worker (ground truth, from the workers)."""
        return injected_rank(self.sim_dir, self.spec.fault, self.placement)

    @property
    def fault_to_exit_s(self) -> float | None:
        """Seconds from the fault to the last pod's exit."""
        if self.fault_ns is None or not self.pods:
            return None
        return to_seconds(max(p.exited_ns for p in self.pods) - self.fault_ns)


#: Starts (or restarts) the pod of a name with its log at a path.
PodStarter = Callable[[str, Path], "Pod"]


def _handles_sigterm(pid: int) -> bool:
    """Whether process ``pid`` catches SIGTERM (``SigCgt`` in ``/proc/<pid>/status``); False once gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            caught = next(line for line in status if line.startswith("SigCgt:"))
    except (OSError, StopIteration):
        return False
    return bool(int(caught.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
