"""A hung rank with the collective timeout users run: time to the hang watch's verdict, to the training
operator's decision and to the last pod's exit; and the healthy pauses it must never call hung.

Run by hand: ``.venv/bin/python -m benchmarks.hang_verdict [--trials 3] [--sizes 2x2,4x2,8x1]
[--kinds hang,recv-hang,ring-hang,compute,write]``.

Each trial runs a simulated PyTorchJob (``rootcause_harness.flytekit``, spawned workers, default
settings: ``hang_after_s`` 60 s) whose process groups all have a 30-minute timeout
(``train_<size>_long_timeout``), with one rank of a rotating pod that, at step 3:

- ``hang``: sleeps in user code while its peers wait in the step's all-reduce;
- ``recv-hang``: blocks in a receive from the next rank, which waits in the all-reduce for it;
- ``ring-hang``: sleeps while the step is a ring of blocking send/recv (no Flight Recorder number);
- ``compute``: computes alone for 75 s, then trains on (the job must succeed);
- ``write``: writes a large file for 75 s at a slow device's pace (hardly any CPU), then trains on.

A hang trial is right when the console, read at the operator's decision (the first pod exit), names
the faulty pod and rank as hung; a pause trial when the job succeeds with no verdict. Printed per
size and kind: right/trials, then median/p90 seconds from the fault to the verdict (the hung pod's
teardown, read from its document's agent timeline), to the operator's decision, and to the last
pod's exit (the issue's target: under 150 s).
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from pathlib import Path

from flytekit.core.base_task import PythonTask

from benchmarks.e2e import pod_phases
from benchmarks.fault_kinds import fault_to_decision_s, quantiles, right_at_decision
from rootcause_harness.faults import HEALTHY_PAUSES, Communication, Fault, FaultKind
from rootcause_harness.flytekit.console import console_at_decision
from rootcause_harness.flytekit.job import JobResult, JobSpec, StoreAccess, run_job
from rootcause_harness.flytekit.training import (
    train_2x2_long_timeout,
    train_4x2_long_timeout,
    train_8x1_long_timeout,
)

SIZES: dict[str, tuple[PythonTask, int, int]] = {
    "2x2": (train_2x2_long_timeout, 2, 2),
    "4x2": (train_4x2_long_timeout, 4, 2),
    "8x1": (train_8x1_long_timeout, 8, 1),
}
KINDS: dict[str, tuple[FaultKind, Communication]] = {
    "hang": (FaultKind.HANG, Communication.ALL_REDUCE),
    "recv-hang": (FaultKind.RECV_HANG, Communication.ALL_REDUCE),
    "ring-hang": (FaultKind.HANG, Communication.SEND_RECV),
    "compute": (FaultKind.COMPUTE, Communication.ALL_REDUCE),
    "write": (FaultKind.WRITE, Communication.ALL_REDUCE),
}
#: How long a trial may run: a pause's job lasts 75 s and more, start-up included.
TRIAL_TIMEOUT_S = 300.0


def fault_for(kind: str, trial: int, nnodes: int, nproc: int) -> Fault:
    """Rotate the faulty pod and local rank between trials (pod 1 first)."""
    fault_kind, communication = KINDS[kind]
    return Fault(fault_kind, pod=f"train-worker-{(trial + 1) % nnodes}", local_rank=trial % nproc,
                 communication=str(communication))


def _verdict_in_logs(result: JobResult) -> bool:
    return any("hang watch:" in pod.log_path.read_text(errors="replace") for pod in result.pods)


def run(size: str, kind: str, trials: int, root: Path) -> None:
    task, nnodes, nproc = SIZES[size]
    right = 0
    to_verdict: list[float] = []
    to_decision: list[float] = []
    to_exit: list[float] = []
    for trial in range(trials):
        fault = fault_for(kind, trial, nnodes, nproc)
        spec = JobSpec(task=task, nnodes=nnodes, nproc_per_node=nproc, store=StoreAccess(str(root / "store")),
                       fault=fault, timeout_s=TRIAL_TIMEOUT_S)
        result = run_job(spec, work_dir=root / "pods")
        view = console_at_decision(result, aggregation=True)
        if fault.kind in HEALTHY_PAUSES:
            ok = view.outcome == "success" and not result.timed_out and not _verdict_in_logs(result)
        else:
            ok = right_at_decision(view, (result.injected_worker, result.injected_rank), kind) and (
                "hung: it made no progress" in view.message)
            noticed = pod_phases(result).get(result.injected_worker or "", {}).get("noticed")
            if noticed is not None:
                to_verdict.append(noticed)
        right += ok
        if (decided := fault_to_decision_s(result.operator.decided_ns, result.fault_ns)) is not None:
            to_decision.append(decided)
        if result.fault_to_exit_s is not None and not result.timed_out:
            to_exit.append(result.fault_to_exit_s)
        if not ok:
            print(f"  trial {trial} wrong: {view.outcome} {view.worker} rank {view.rank}; logs in {result.sim_dir}",
                  flush=True)
    print(f"{size:<4} {kind:<10} {right}/{trials}  verdict {quantiles(to_verdict)}  decision {quantiles(to_decision)}"
          f"  all exited {quantiles(to_exit)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--sizes", default=",".join(SIZES))
    parser.add_argument("--kinds", default=",".join(KINDS))
    args = parser.parse_args()
    logging.disable(logging.CRITICAL)
    root = Path(tempfile.mkdtemp(prefix="rootcause-hang-verdict-"))
    print(f"{args.trials} trials per size and kind; 30-minute collective timeouts, default settings; "
          "right/trials, median/p90 seconds from the fault")
    for size in args.sizes.split(","):
        for kind in args.kinds.split(","):
            run(size, kind, args.trials, root)


if __name__ == "__main__":
    main()
