"""The fault kinds both end-to-end benchmarks inject (``e2e.py`` for flytekit, ``e2e_flyte2.py`` for
Flyte 2), which pod gets each trial's fault, and how their times are summed up."""

from __future__ import annotations

import statistics

from rootcause_harness.faults import (
    IN_RENDEZVOUS,
    NOT_STORE_HOST_POD,
    POD_FAULTS,
    STORE_HOST_POD,
    Communication,
    Fault,
    FaultKind,
)
from rootcause_harness.operator import ConsoleView

#: Benchmark fault kinds: the simulator's fault, and how far the faulty pod's clock runs ahead.
KINDS: dict[str, tuple[FaultKind, float]] = {
    "raise": (FaultKind.RAISE, 0.0),
    "sigkill": (FaultKind.SIGKILL, 0.0),
    "sigabrt": (FaultKind.SIGABRT, 0.0),
    "sigsegv": (FaultKind.SIGSEGV, 0.0),
    "exit": (FaultKind.EXIT, 0.0),
    "ordering": (FaultKind.ORDERING, 0.0),
    "skew": (FaultKind.RAISE, 1.0),
    "vanish": (FaultKind.VANISH, 0.0),  # the whole faulty pod killed at once (a lost node)
    "hang": (FaultKind.HANG, 0.0),  # one rank sleeps; its peers time out in the next all-reduce (3 s)
    "init-hang": (FaultKind.INIT_HANG, 0.0),  # one rank never reaches init_process_group (peers wait 20 s)
    "freeze": (FaultKind.FREEZE, 0.0),  # the whole faulty pod stopped at once (a frozen node): no socket closes
    "preempt": (FaultKind.PREEMPT, 0.0),  # the kubelet SIGTERMs the pod's main process, SIGKILL 30 s later
    # the same, while the pod's agent is in the rendezvous (no worker runs yet)
    "preempt-rendezvous": (FaultKind.PREEMPT, 0.0),
    # one rank sleeps while its peers wait in another kind of call (the peers time out after 3 s)
    **{f"hang-{how}": (FaultKind.HANG, 0.0) for how in Communication if how != Communication.ALL_REDUCE},
}
#: Kinds injected at a step of their own rather than at the training step (``Fault.step``'s default).
STEPS: dict[str, int] = {"preempt-rendezvous": IN_RENDEZVOUS}
#: Kinds whose faulty pod is the store's host in every other trial (the store goes with the pod), another pod
#: in the rest.
STORE_HOST_ALTERNATES = ("freeze", "preempt-rendezvous")
#: Kinds of a whole pod: the pod is what a report names.
POD_ONLY_KINDS = tuple(kind for kind, (fault, _) in KINDS.items() if fault in POD_FAULTS)


#: Workers per pod of each benchmarked job size (pods x workers: 2 x 2, 4 x 2, 8 x 1).
NPROC_PER_NODE = {2: 2, 4: 2, 8: 1}


def fault_for(kind: str, trial: int, nnodes: int = 2) -> Fault:
    """Rotate the faulty pod (and its local rank) between trials so no pod is favoured; with 2 pods,
    pod 1 first, as before. A frozen pod is the store host's in every other trial (the store stops
    answering too), another pod in the rest; so is a pod stopped in its rendezvous."""
    fault_kind, clock_offset_s = KINDS[kind]
    index = (trial + 1) % nnodes
    pod, other = f"train-worker-{index}", f"train-worker-{(index + 1) % nnodes}"
    if kind in STORE_HOST_ALTERNATES:
        pod = STORE_HOST_POD if trial % 2 == 0 else NOT_STORE_HOST_POD
    communication = kind.removeprefix("hang-") if kind.startswith("hang-") else Communication.ALL_REDUCE
    step = {"step": STEPS[kind]} if kind in STEPS else {}
    return Fault(fault_kind, pod=pod, local_rank=trial % NPROC_PER_NODE[nnodes], second_pod=other, second_local_rank=0,
                 clock_offset_s=clock_offset_s, communication=str(communication), **step)


def quantiles(values: list[float]) -> str:
    if not values:
        return f"{'n/a':>13}"
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return f"{statistics.median(ordered):5.2f}/{p90:5.2f} s"


def right_at_decision(view: ConsoleView, injected: tuple[str | None, int | None], kind: str) -> bool:
    """The console, read at the training operator's decision, names the faulty pod (and rank, but for
    a fault of a whole pod): the job was Succeeded then, and an error document was there to read."""
    worker, rank = injected
    return view.outcome == "error" and view.worker == worker and (kind in POD_ONLY_KINDS or view.rank == rank)


def decision_cell(rows: list[tuple[bool, float | None, str]], trials: int) -> str:
    """``right/trials, median/p90 fault -> decision`` and how the wrong ones ended (``job failed``...)."""
    ok = sum(right for right, _, _ in rows)
    wrong = [outcome for right, _, outcome in rows if not right]
    how = "".join(f", {wrong.count(o)} {o}" for o in sorted(set(wrong)))
    return f"{ok}/{trials}{how}, {quantiles([t for _, t, _ in rows if t is not None])}"


def fault_to_decision_s(decided_ns: int | None, fault_ns: int | None) -> float | None:
    return None if decided_ns is None or fault_ns is None else (decided_ns - fault_ns) / 1e9


#: ``--decision-only``: the pods still running this long after the operator's decision are deleted,
#: as Flyte deletes a finished PyTorchJob, so a trial lasts until the decision, not until the last
#: pod ends on its own; only the columns "at the operator's decision" mean anything then.
DECISION_ONLY_DELETE_S = 1.0
#: ``--decision-only``: how long upstream's job with a frozen pod is given (it decides only at gloo's
#: 30-minute collective timeout; a frozen node's kubelet reports nothing).
DECISION_ONLY_FREEZE_BASELINE_S = 20.0


def job_limits(kind: str, label: str, *, decision_only: bool, freeze_baseline_s: float) -> dict[str, float]:
    """The simulated job's time limits for one trial (``JobSpec`` keyword arguments): upstream's
    frozen-pod job is cut at ``freeze_baseline_s``; with ``decision_only`` every job ends
    :data:`DECISION_ONLY_DELETE_S` after the operator's decision."""
    limits: dict[str, float] = {}
    if kind == "freeze" and label == "baseline":
        limits["timeout_s"] = DECISION_ONLY_FREEZE_BASELINE_S if decision_only else freeze_baseline_s
    if decision_only:
        limits["delete_after_decision_s"] = DECISION_ONLY_DELETE_S
    return limits
