"""Faults the simulator injects into one global rank, passed to the pods in one variable.

The training task (``simulation.training``) calls :func:`maybe_inject` once per step; the worker the
fault names (pod name and local rank: the global rank a pod gets is decided by the rendezvous)
then raises, dies by SIGKILL or SIGABRT, segfaults (a real invalid read, as a broken extension
does), exits non-zero without a word (``os._exit``, as a C library's ``exit()``), or hangs; or,
before the default process group forms (:data:`BEFORE_INIT`), never reaches it (a worker stuck loading
data or a model, or on a hung mount).
``ordering`` makes a worker on another pod raise its own, independent error ``second_delay_s``
after the first: the earlier one is the root cause even though both happen within the same
wall-clock second. ``clock_offset_s`` runs the faulty pod's wall clock that far ahead of the
others' (``skewed_clock/sitecustomize.py``), as on a node whose clock is off: its failure then
*looks* later than its victims' to anyone comparing stamps.

Faults that strike a pod's agent rather than a worker: :func:`hang_agent_monitor` (the watchdog
tests' task modules call it themselves when a pod imports or runs them),
:func:`reap_exited_workers_first` (called alike), and a ``PREEMPT`` at
:data:`IN_RENDEZVOUS`, armed by :func:`arm_agent_faults` where the simulator's task modules are
imported.
"""

from __future__ import annotations

import ctypes
import dataclasses
import enum
import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from rootcause_core.worker_names import current_worker_name
from rootcause_engine.agent.rendezvous_host import agent_hosts_store, this_agent_hosts_store

FAULT_VARIABLE = "ROOTCAUSE_SIM_FAULT"
#: How a ``RAISE`` fault's exception message starts (a training loop may catch exactly it).
INJECTED_MESSAGE = "injected failure"
SIM_DIR_VARIABLE = "ROOTCAUSE_SIM_DIR"
FAULT_TIME_FILE = "fault_time_ns"
#: Set in the skewed pod only: how far its wall clock runs ahead, in ns (read by ``sitecustomize``).
CLOCK_OFFSET_VARIABLE = "ROOTCAUSE_SIM_CLOCK_OFFSET_NS"
#: ``sitecustomize`` that skews a pod's wall clock (a folder, not a package: only ``site`` loads it).
SKEWED_CLOCK_DIR = Path(__file__).with_name("skewed_clock")
#: ORDERING: where the first failing worker will record its error (the second waits for that file).
FIRST_ERROR_FILE = "first_error_file"
#: ``sitecustomize`` that skews a pod's upstream at interpreter start (:func:`upstream_skew_env`).
UPSTREAM_SKEW_DIR = Path(__file__).with_name("upstream_skew")
#: Read by that ``sitecustomize``: dotted names it deletes, comma-separated.
REMOVED_ATTRIBUTES_VARIABLE = "ROOTCAUSE_SIM_REMOVED_ATTRIBUTES"
#: Read by that ``sitecustomize``: dotted names of classes it makes unpatchable, comma-separated.
FROZEN_CLASSES_VARIABLE = "ROOTCAUSE_SIM_FROZEN_CLASSES"


class FaultKind(enum.StrEnum):
    RAISE = "raise"
    SIGKILL = "sigkill"
    SIGABRT = "sigabrt"
    SIGSEGV = "sigsegv"  # a real segfault: the worker reads address 0
    EXIT = "exit"  # os._exit(3): no exception, no record, no signal; only the exit code tells
    HANG = "hang"
    ORDERING = "ordering"
    VANISH = "vanish"  # the whole pod dies at once: agent and every worker, SIGKILL (a lost node)
    INIT_HANG = "init-hang"  # the worker hangs before init_process_group: its peers wait for it there
    FREEZE = "freeze"  # every process of the pod stopped at once (SIGSTOP): sockets open, nothing answers
    #: one worker stopped (SIGSTOP) while its agent and pod live on: what a worker stuck in an
    #: uninterruptible driver or NFS call looks like to its peers
    FREEZE_WORKER = "freeze-worker"
    #: the pod's kubelet SIGTERMs its main process (a spot reclaim, a drain, an eviction), SIGKILL after the grace
    PREEMPT = "preempt"
    #: the worker blocks in a receive from the next rank, which never sends (it waits in the step's
    #: collective for this one): a deadlock of mismatched calls
    RECV_HANG = "recv-hang"
    #: not a fault: the worker computes alone for ``duration_s`` (a rank-0 evaluation, a checkpoint
    #: serialised) while its peers wait in the step's collective, then trains on
    COMPUTE = "compute"
    #: the pod's node loses the network (a failed NIC or switch port): every packet dropped both ways,
    #: nothing closed, its processes run on; its kubelet reports nothing. Needs the job on a
    #: :class:`~rootcause_harness.netns.PodNetwork` (the simulator makes the cut)
    PARTITION = "partition"
    #: the links between the pod and every other pod are cut, each way, while all still reach the
    #: object store and the cluster's API (a network policy or a route between nodes): both sides
    #: live and see each other fall silent. Needs a :class:`~rootcause_harness.netns.PodNetwork`
    LINK_CUT = "link-cut"
    #: not a fault: the worker writes a large file for ``duration_s`` (a few MB a second, as to a slow
    #: network filesystem, with little CPU) while its peers wait, then trains on
    WRITE = "write"
    #: not a fault: the worker blocks in a read from a pipe for ``duration_s`` (no CPU, no I/O
    #: counted: an NFS failover or a storage stall), then trains on
    IO_STALL = "io-stall"


#: Kinds that end in success: a long healthy pause of one rank, which nothing may take for a hang.
HEALTHY_PAUSES = frozenset({FaultKind.COMPUTE, FaultKind.WRITE, FaultKind.IO_STALL})
#: Faults of a whole pod, not of one of its ranks: the pod is what a report names (a lost or frozen
#: node's peers write for it; a stopped pod's failure is the pod's, its workers are victims).
POD_FAULTS = frozenset({FaultKind.VANISH, FaultKind.FREEZE, FaultKind.PREEMPT, FaultKind.PARTITION})


class Communication(enum.StrEnum):
    """How the training step exchanges its "gradients": one collective, or point-to-point.

    A rank that hangs leaves its peers waiting in whichever the step uses, and each fails them
    differently: the root of a broadcast waits for its sends while the other receivers go on to the
    next step; a ring of send/recv stalls neighbour after neighbour, and torch's Flight Recorder
    records no point-to-point call under gloo.
    """

    ALL_REDUCE = "all_reduce"
    BROADCAST_ROOT = "broadcast_root"  # the faulty rank is the broadcast's source
    BROADCAST_RECEIVER = "broadcast_receiver"  # the source is a rank of the next pod; the faulty rank receives
    BARRIER = "barrier"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    SEND_RECV = "send_recv"  # a ring: each rank sends to the next and receives from the previous


#: ``maybe_inject``'s step before the training task calls ``init_process_group``.
BEFORE_INIT = -1
#: A ``PREEMPT``'s step for a pod stopped while it still starts (its imports, its input download, the
#: task's load), ``sigterm_after_s`` after its entrypoint's first line ran: no worker runs yet, so the
#: simulator itself asks for the stop (:func:`ask_for_start_preemption`).
AT_POD_START = -2
#: A ``PREEMPT``'s step for a pod stopped while its agent is in the rendezvous: the round is agreed,
#: the workers' ranks are not yet assigned, no worker runs (:func:`arm_agent_faults`). With
#: :data:`STORE_HOST_POD`, the other pods lose the store in the middle of their rank assignment.
IN_RENDEZVOUS = -3


#: ``Fault.pod`` value that means "whichever pod's agent hosts the rendezvous store" (which pod
#: that is on one host is decided at run time: the first agent to bind the endpoint's port).
STORE_HOST_POD = "@store-host"
#: ``Fault.pod`` value that means "a pod whose agent does not host the rendezvous store".
NOT_STORE_HOST_POD = "@not-store-host"
#: Ground truth for the simulator: the pod a fault was injected into (the selector resolved).
FAULTY_POD_FILE = "faulty_pod"
#: Written by a pod that froze itself: the simulator then waits for the other pods only, and
#: deletes the frozen one after them, as Kubernetes deletes the pods of a failed job.
FROZEN_POD_FILE = "frozen_pod"
#: Written by a pod whose node is lost (every process SIGKILLed at once): its kubelet reports nothing.
LOST_NODE_FILE = "lost_node"
#: Written by the faulty worker of a ``PREEMPT``: the simulator then stops that pod as a kubelet would.
PREEMPT_REQUEST_FILE = "preempt_pod"
#: Written by the faulty worker of a ``PARTITION``: the simulator then cuts that pod off the network.
PARTITION_REQUEST_FILE = "partition_pod"
#: In front of the pod's name in that file for a ``LINK_CUT``: only its links to the others go.
LINK_CUT_PREFIX = "links:"
#: Written by the simulator once it cut a pod off: its kubelet is cut off too, and reports nothing.
PARTITIONED_POD_FILE = "partitioned_pod"


@dataclasses.dataclass(frozen=True)
class Fault:
    """``kind`` injected into worker ``local_rank`` of pod ``pod`` at training step ``step``."""

    kind: FaultKind
    pod: str
    local_rank: int = 0
    step: int = 3
    second_pod: str | None = None  # ORDERING only: where the later, independent failure happens
    second_local_rank: int = 0
    second_delay_s: float = 0.05
    clock_offset_s: float = 0.0  # how far the faulty pod's wall clock runs ahead of the others'
    #: What every worker's training step communicates with (:class:`Communication`): a HANG then
    #: leaves its peers waiting in that call.
    communication: str = "all_reduce"
    #: PREEMPT, or any fault with ``sigterm_after_s``: how many SIGTERMs the pod's main process gets
    #: (a second one is what a ``kubectl delete`` on top of a drain sends)
    signals: int = 1
    #: any other kind: the kubelet also stops the faulty pod this long after the fault (a SIGTERM that
    #: comes while the pod writes its own failure report); ``None``: never
    sigterm_after_s: float | None = None
    #: COMPUTE, WRITE and IO_STALL: how long the worker computes, writes or waits in its read
    duration_s: float = 75.0

    def to_env(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_env(cls, value: str | None) -> Fault | None:
        if not value:
            return None
        data = json.loads(value)
        data["kind"] = FaultKind(data["kind"])
        return cls(**data)


def upstream_skew_env(
    where: Path,
    *,
    versions: dict[str, str] | None = None,
    removed: tuple[str, ...] = (),
    frozen: tuple[str, ...] = (),
    pythonpath: str = "",
) -> dict[str, str]:
    """The variables that give every process of a pod another upstream than the installed one, as
    users have: ``versions`` (distribution -> version) are what ``importlib.metadata`` reports (a
    ``<name>-<version>.dist-info`` in ``where``, first on the path, while the real package imports),
    ``removed`` attributes are gone and ``frozen`` classes cannot be patched
    (``upstream_skew/sitecustomize.py``). ``pythonpath``: the path the pods had, kept after these."""
    where.mkdir(parents=True, exist_ok=True)
    for distribution, version in (versions or {}).items():
        info = where / f"{distribution.replace('-', '_')}-{version}.dist-info"
        info.mkdir(exist_ok=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n")
    path = os.pathsep.join(p for p in (str(UPSTREAM_SKEW_DIR), str(where), pythonpath) if p)
    return {"PYTHONPATH": path, REMOVED_ATTRIBUTES_VARIABLE: ",".join(removed),
            FROZEN_CLASSES_VARIABLE: ",".join(frozen)}


def _sim_dir() -> Path:
    return Path(os.environ[SIM_DIR_VARIABLE])


def record_fault_time(path: Path) -> None:
    """Ground truth for the simulator: when the fault happened (written before it happens), on the
    machine's clock (a skewed pod's offset taken back out)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(str(time.time_ns() - int(os.environ.get(CLOCK_OFFSET_VARIABLE) or 0)))
    tmp.replace(path)


def is_faulty_pod(selector: str, pod: str, *, in_agent: bool = False) -> bool:
    """``selector`` is a pod name, or one of the store-host selectors (resolved by asking /proc about
    this worker's agent, or with ``in_agent`` this process; of several pods that match, the first to
    claim the fault gets it, so exactly one pod is faulty)."""
    if selector not in (STORE_HOST_POD, NOT_STORE_HOST_POD):
        return selector == pod
    hosts = this_agent_hosts_store() if in_agent else agent_hosts_store()
    if hosts is None or hosts != (selector == STORE_HOST_POD):
        return False
    try:
        with open(_sim_dir() / FAULTY_POD_FILE, "x") as claim:
            claim.write(pod)
    except FileExistsError:
        return False
    return True


def _signal_this_pod(signal_number: int) -> None:
    """Send ``signal_number`` to every process of this pod, this one last. (A pod of the simulator is
    a session of its own, so "this pod" is every process of this worker's session.)"""
    session, me = os.getsid(0), os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            if os.getsid(int(entry)) == session:
                os.kill(int(entry), signal_number)
        except OSError:  # gone meanwhile, or not ours
            continue
    os.kill(me, signal_number)


def vanish_pod(pod: str) -> None:
    """Every process of this pod dies by SIGKILL at once, as when its node is lost (a kernel panic, a
    power loss): no process of the pod is left to notice, report or upload anything, and no kubelet
    reports the pod's end."""
    (_sim_dir() / LOST_NODE_FILE).write_text(pod)
    _signal_this_pod(signal.SIGKILL)


@dataclasses.dataclass(frozen=True)
class PreemptRequest:
    """A worker's request that the simulator stop its pod as the kubelet would (``pods.PodWatch``):
    ``signals`` SIGTERMs to the pod's main process at ``due_s`` (wall clock), SIGKILL after the grace."""

    pod: str
    signals: int = 1
    due_s: float = 0.0
    #: a stop while the pod starts: due this long after its main process first handles SIGTERM
    #: (its entrypoint's first line ran), or at ``due_s`` + :data:`ENTRYPOINT_WAIT_S` if it never
    #: does. Before that line only the interpreter's own start runs, whose SIGTERM is Python's
    #: default (exit 143) whatever the entrypoint: on a busy machine that start alone takes seconds.
    after_entrypoint_s: float | None = None

    def write(self, sim_dir: Path) -> None:
        tmp = sim_dir / f"{PREEMPT_REQUEST_FILE}.tmp"
        tmp.write_text(json.dumps(dataclasses.asdict(self)))
        tmp.replace(sim_dir / PREEMPT_REQUEST_FILE)

    @classmethod
    def read(cls, sim_dir: Path) -> PreemptRequest | None:
        try:
            return cls(**json.loads((sim_dir / PREEMPT_REQUEST_FILE).read_text()))
        except (FileNotFoundError, ValueError, TypeError):
            return None


#: How long a stop at a pod's start waits for the pod's entrypoint to handle SIGTERM at most.
ENTRYPOINT_WAIT_S = 60.0


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def ask_for_preemption(pod: str, signals: int, after_s: float = 0.0) -> None:
    """Ask the simulator to stop this pod as its kubelet would for a preemption (see ``pods.PodWatch``)."""
    PreemptRequest(pod, signals, time.time() + after_s).write(_sim_dir())


def ask_for_start_preemption(sim_dir: Path, fault: Fault | None) -> None:
    """For a ``PREEMPT`` at :data:`AT_POD_START`: the kubelet stops ``fault.pod`` (a pod's name: no
    worker exists yet to resolve a selector) ``sigterm_after_s`` after its entrypoint's first line."""
    if fault is None or fault.kind != FaultKind.PREEMPT or fault.step != AT_POD_START:
        return
    (sim_dir / FAULTY_POD_FILE).write_text(fault.pod)
    request = PreemptRequest(fault.pod, fault.signals, time.time(), after_entrypoint_s=fault.sigterm_after_s or 0.0)
    request.write(sim_dir)


def freeze_pod(pod: str) -> None:
    """Every process of this pod stops at once (SIGSTOP), as when its node freezes (a VM paused by its
    host, a kernel stuck) or drops off the network: its sockets stay open, so no peer sees a closed
    connection, and nothing of the pod answers, beats or reports any more."""
    (_sim_dir() / FROZEN_POD_FILE).write_text(pod)
    _signal_this_pod(signal.SIGSTOP)


def _block_forever(self: Any, worker_group: Any) -> Any:
    """The agent's monitor poll under :func:`hang_agent_monitor`: a wait that nothing ends."""
    threading.Event().wait()


#: How long a pod stopped in its rendezvous waits for its SIGTERM before it goes on (it never should).
AWAIT_STOP_S = 120.0


def arm_agent_faults() -> None:
    """Arm, in this process, the configured fault that strikes a pod's agent: a ``PREEMPT`` at
    :data:`IN_RENDEZVOUS`. torch's agent then asks, when it assigns its workers' ranks (the round is
    agreed), whether its pod is the faulty one; that pod asks the simulator to stop it as its kubelet
    would and waits in place, so the SIGTERM lands in the rendezvous whatever the machine's load
    (a timed SIGTERM lands there only by chance). Nothing for any other fault; harmless in a worker
    process, which runs no agent. torch's agent is imported here, on demand, as in
    :func:`hang_agent_monitor`."""
    fault = Fault.from_env(os.environ.get(FAULT_VARIABLE))
    if fault is None or fault.kind != FaultKind.PREEMPT or fault.step != IN_RENDEZVOUS:
        return
    from torch.distributed.elastic.agent.server.api import SimpleElasticAgent

    assign_ranks = SimpleElasticAgent._assign_worker_ranks

    def stopped_in_rendezvous(agent: Any, *args: Any, **kwargs: Any) -> Any:
        pod = current_worker_name()
        if is_faulty_pod(fault.pod, pod, in_agent=True):
            if fault.pod not in (STORE_HOST_POD, NOT_STORE_HOST_POD):
                (_sim_dir() / FAULTY_POD_FILE).write_text(pod)
            record_fault_time(_sim_dir() / FAULT_TIME_FILE)
            ask_for_preemption(pod, fault.signals)
            deadline = time.monotonic() + AWAIT_STOP_S
            while time.monotonic() < deadline:  # the SIGTERM's handler raises in this sleep
                time.sleep(0.05)
        return assign_ranks(agent, *args, **kwargs)

    SimpleElasticAgent._assign_worker_ranks = stopped_in_rendezvous  # type: ignore[method-assign]


def hang_agent_monitor() -> None:
    """Make torch's agent in this process hang: ``LocalElasticAgent._monitor_workers`` blocks forever.

    The agent then never notices that its workers failed, never tears them down and never returns, like
    an agent stuck in a call that never ends. Only the agent watchdog can end such a pod, and that is
    what the tests using this check. The patch lasts as long as the process. torch's agent is imported
    here, not at the top: the simulator, the demos and the training loops import this module too, and
    none of them needs the agent.
    """
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

    LocalElasticAgent._monitor_workers = _block_forever  # type: ignore[method-assign]


def reap_exited_workers_first() -> None:
    """Make every ``multiprocessing`` child of this process reaped by other code before
    ``multiprocessing`` reads its exit: its ``waitpid`` then fails with ``ECHILD`` and the exit code
    it reads is ``None``, as in a process where a library reaps children it did not start. torch's
    agent builds its report of failed workers from those codes, so its report itself fails there
    (``TypeError``) in place of a ``ChildFailedError``. The patch lasts as long as the process."""
    from multiprocessing import popen_fork

    original_poll = popen_fork.Popen.poll

    def poll(self: Any, flag: int = os.WNOHANG) -> int | None:
        if self.returncode is None:
            try:
                if os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                    os.waitpid(self.pid, 0)  # the foreign reap: the status goes to someone else
            except ChildProcessError:
                pass
        return original_poll(self, flag)

    popen_fork.Popen.poll = poll  # type: ignore[method-assign]


def receive_from_next_rank() -> None:
    """Block in ``torch.distributed.recv`` from the next global rank, which never sends (it waits in
    the step's collective for this rank): until the process group's timeout."""
    import torch
    import torch.distributed as dist

    dist.recv(torch.empty(1), src=(dist.get_rank() + 1) % dist.get_world_size())


def compute_for(seconds: float) -> None:
    """Keep one core busy for ``seconds`` (matrix products), as an evaluation or a serialisation does."""
    import torch

    deadline, product = time.monotonic() + seconds, torch.rand(128, 128)
    while time.monotonic() < deadline:
        product = (product @ product).clamp_(-1.0, 1.0)


#: WRITE's pace: a chunk of this many bytes every :data:`WRITE_PAUSE_S` (about 4 MB/s, as to a slow
#: network filesystem: a few milliseconds of CPU a second, so only the I/O shows the progress).
WRITE_CHUNK_BYTES = 1 << 20
WRITE_PAUSE_S = 0.25


def write_for(seconds: float, path: Path) -> None:
    """Write ``path`` for ``seconds`` at a slow device's pace (each chunk flushed to the disk), then remove it."""
    chunk, deadline = os.urandom(WRITE_CHUNK_BYTES), time.monotonic() + seconds
    try:
        with open(path, "wb") as handle:
            while time.monotonic() < deadline:
                handle.write(chunk)
                handle.flush()
                os.fsync(handle.fileno())
                time.sleep(WRITE_PAUSE_S)
    finally:
        path.unlink(missing_ok=True)


def stall_in_read(seconds: float, path: Path) -> None:
    """Block in a read from the FIFO ``path`` until its writer (a thread here, the storage server of a
    real stall) sends one byte ``seconds`` later: the thread sleeps in the kernel, as on a stalled
    network filesystem, spending no CPU and counting no I/O."""
    os.mkfifo(path)

    def answer_late() -> None:
        with open(path, "wb") as writer:
            time.sleep(seconds)
            writer.write(b"x")

    threading.Thread(target=answer_late, name="stalled-storage", daemon=True).start()
    try:
        with open(path, "rb") as reader:
            reader.read(1)
    finally:
        path.unlink(missing_ok=True)


def maybe_inject(step: int, pod: str, local_rank: int) -> None:
    """Inject the configured fault if this worker and step are due (:data:`BEFORE_INIT`: an
    ``INIT_HANG`` is due then, whatever its ``step``, and nothing else is)."""
    fault = Fault.from_env(os.environ.get(FAULT_VARIABLE))
    if fault is None or step != (BEFORE_INIT if fault.kind == FaultKind.INIT_HANG else fault.step):
        # (any other kind is due at its own step, BEFORE_INIT included: a pod lost before the group forms)
        return
    fault_file = _sim_dir() / FAULT_TIME_FILE
    first_error_pointer = _sim_dir() / FIRST_ERROR_FILE
    if local_rank == fault.local_rank and is_faulty_pod(fault.pod, pod):
        if fault.kind == FaultKind.ORDERING:
            first_error_pointer.write_text(os.environ.get("TORCHELASTIC_ERROR_FILE", ""))
        if fault.pod not in (STORE_HOST_POD, NOT_STORE_HOST_POD):
            (_sim_dir() / FAULTY_POD_FILE).write_text(pod)
        record_fault_time(fault_file)
        if fault.sigterm_after_s is not None and fault.kind != FaultKind.PREEMPT:
            ask_for_preemption(pod, fault.signals, fault.sigterm_after_s)
        if fault.kind in (FaultKind.RAISE, FaultKind.ORDERING):
            raise RuntimeError(f"{INJECTED_MESSAGE} on {pod} local rank {local_rank} at step {step}")
        if fault.kind == FaultKind.SIGKILL:
            os.kill(os.getpid(), signal.SIGKILL)
        if fault.kind == FaultKind.SIGABRT:
            os.abort()
        if fault.kind == FaultKind.SIGSEGV:
            ctypes.string_at(0)
        if fault.kind == FaultKind.EXIT:
            os._exit(3)
        if fault.kind == FaultKind.VANISH:
            vanish_pod(pod)
        if fault.kind == FaultKind.PREEMPT:
            ask_for_preemption(pod, fault.signals)
            return  # the worker goes on: the kubelet signals the pod's main process, not the workers
        if fault.kind in (FaultKind.PARTITION, FaultKind.LINK_CUT):
            request = pod if fault.kind == FaultKind.PARTITION else f"{LINK_CUT_PREFIX}{pod}"
            _write_atomically(_sim_dir() / PARTITION_REQUEST_FILE, request)
            return  # the worker goes on: the network goes, not the process
        if fault.kind == FaultKind.FREEZE:
            freeze_pod(pod)
        if fault.kind == FaultKind.FREEZE_WORKER:
            os.kill(os.getpid(), signal.SIGSTOP)
        if fault.kind in (FaultKind.HANG, FaultKind.INIT_HANG):
            while True:
                time.sleep(3600)
        if fault.kind == FaultKind.RECV_HANG:
            receive_from_next_rank()
        if fault.kind == FaultKind.COMPUTE:
            compute_for(fault.duration_s)
        if fault.kind == FaultKind.WRITE:
            write_for(fault.duration_s, _sim_dir() / f"large-file-{pod}-{local_rank}.bin")
        if fault.kind == FaultKind.IO_STALL:
            stall_in_read(fault.duration_s, _sim_dir() / f"stalled-read-{pod}-{local_rank}.fifo")
    if fault.kind == FaultKind.ORDERING and (pod, local_rank) == (fault.second_pod, fault.second_local_rank):
        # off any collective, so this is an independent failure, not a victim of the first one;
        # timed from the first worker's *recorded* error (its error file, written complete), so a
        # first worker descheduled between its fault and its record cannot swap the order
        deadline = time.monotonic() + 60
        while not first_error_pointer.exists() and time.monotonic() < deadline:
            time.sleep(0.002)
        first_error = first_error_pointer.read_text() if first_error_pointer.exists() else ""
        while first_error and not os.path.exists(first_error) and time.monotonic() < deadline:
            time.sleep(0.002)
        time.sleep(fault.second_delay_s)
        raise RuntimeError(f"independent later failure on {pod} local rank {local_rank} at step {step}")
