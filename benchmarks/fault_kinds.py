"""The fault kinds both end-to-end benchmarks inject (``e2e.py`` for flytekit, ``e2e_flyte2.py`` for
Flyte 2), which pod gets each trial's fault, and how their times are summed up."""

from __future__ import annotations

import statistics

from rootcause_harness.faults import NOT_STORE_HOST_POD, STORE_HOST_POD, Communication, Fault, FaultKind

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
    # one rank sleeps while its peers wait in another kind of call (the peers time out after 3 s)
    **{f"hang-{how}": (FaultKind.HANG, 0.0) for how in Communication if how != Communication.ALL_REDUCE},
}
#: Kinds whose whole pod is gone: its peers name the pod, no rank of it reports.
POD_ONLY_KINDS = ("vanish", "freeze")


def fault_for(kind: str, trial: int, nnodes: int = 2) -> Fault:
    """Rotate the faulty pod (and its local rank) between trials so no pod is favoured; with 2 pods,
    pod 1 first, as before. A frozen pod is the store host's in every other trial (the store stops
    answering too), another pod in the rest."""
    fault_kind, clock_offset_s = KINDS[kind]
    index = (trial + 1) % nnodes
    pod, other = f"train-worker-{index}", f"train-worker-{(index + 1) % nnodes}"
    if fault_kind == FaultKind.FREEZE:
        pod = STORE_HOST_POD if trial % 2 == 0 else NOT_STORE_HOST_POD
    communication = kind.removeprefix("hang-") if kind.startswith("hang-") else Communication.ALL_REDUCE
    return Fault(fault_kind, pod=pod, local_rank=trial % 2, second_pod=other, second_local_rank=0,
                 clock_offset_s=clock_offset_s, communication=str(communication))


def quantiles(values: list[float]) -> str:
    if not values:
        return f"{'n/a':>13}"
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return f"{statistics.median(ordered):5.2f}/{p90:5.2f} s"
