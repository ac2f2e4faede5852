"""Soft vs hard restarts of a simulated 2-pod x 2-worker PyTorchJob (spawned workers): what the survivors pay.

Run by hand: ``.venv/bin/python -m benchmarks.soft_restart [--trials 10] [--init-s 3] [--steps 80]
[--cases lost,frozen]``.

Each trial runs the simulator's soft-restart training task (its loop:
``rootcause_harness/soft_training_loop.py``; spawned workers as kfpytorch starts them:
every worker sleeps ``--init-s`` first, standing in for loading a model, then trains ``--steps``
steps of ``--step-s``). Two faults, at step ``--fail-step``:

- ``failure``: worker 1 of pod 1 raises a recoverable error. Run under ``restart_policy="hard"``
  (torch's) and ``"soft"``: pod 1's workers restart, the survivors scale down, then up.
- ``failure-rfc``: the same under ``"soft"``, with a loop that uses the RFC's API alone
  (``get_worker_event``, ``get_worker_info``, torch's own init and destroy).
- ``lost``: pod 1 vanishes (every process SIGKILLed, as a lost node), and the simulator creates
  it again 1 s later, as the training operator does. Soft only: the peer watch declares it lost,
  the survivors scale down; the new pod joins the running job, the survivors scale up. The job
  trains ``--lost-steps`` steps, so that the new pod's start comes before the training's end.
- ``frozen``: every process of pod 1 is SIGSTOPped (a node that froze, lost power or was cut off:
  its sockets stay open, nothing answers). Soft only: the peer watch declares it lost after the
  silence limit (``lost_after_s``, 5 s), the survivors go on without it to the end (nobody replaces
  a node that is not known to be gone); the frozen pod is killed when the job is over.
- ``ends``: as ``failure``, but the restarted workers load for ``--ends-init-s`` and the training
  ends ``--ends-steps-after`` steps after the fault, before they are ready: the job must succeed.

From the workers' own logs:

- survivors' gap at the failure / scale-down: a survivor's last step before the fault to its next
  step (for a lost pod this includes the peer watch's verdict);
- survivors' gap at the scale-up: the step before the world grew back to the next one;
- time until all ranks train again: fault to the moment every rank has stepped in a world of 4;
- steps lost: steps the survivors did before the fault and had to do again;
- survivor processes: distinct pids of the survivor pod's workers (2: they kept their processes);
- total job time: first pod start to last pod exit.

Every trial must succeed (all pods exit 0), or the benchmark stops with the pod logs kept.

The hard runs get ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` from the plugin (a hard policy that
restarts sets it): with torch 2.13's shared rendezvous store, restarted workers of a multi-pod job
read the previous attempt's stale keys and never finish ``init_process_group`` (plain kfpytorch
``Elastic`` too).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from rootcause_harness.faults import NOT_STORE_HOST_POD
from rootcause_harness.flytekit.job import JobResult, JobSpec, StoreAccess, run_job
from rootcause_harness.flytekit.soft_training import (
    hard_train_2x2_spawned,
    soft_train_2x2_spawned,
)
from rootcause_harness.soft_training_loop import read_worker_logs

RESCHEDULE_AFTER_S = 1.0
#: (case, policy) pairs run per trial, in order
RUNS = (("failure", "hard"), ("failure", "soft"), ("failure-rfc", "soft"), ("lost", "soft"), ("frozen", "soft"),
        ("ends", "soft"))
METRICS = (
    ("gap_at_failure_s", "survivors' gap at the fault (s)"),
    ("gap_at_scale_up_s", "survivors' gap at the scale-up (s)"),
    ("all_ranks_back_s", "fault -> all ranks train again (s)"),
    ("steps_lost", "survivors' steps lost"),
    ("survivor_processes", "survivor pod's worker processes"),
    ("total_s", "total job time (s)"),
)


def _events(processes: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [event for events in processes for event in events]


def _run(case: str, policy: str, args: argparse.Namespace, work_dir: Path) -> tuple[JobResult, float]:
    task = soft_train_2x2_spawned if policy == "soft" else hard_train_2x2_spawned
    inputs: dict[str, Any] = {"steps": args.steps, "init_s": args.init_s, "step_s": args.step_s,
                              "fail_step": args.fail_step, "fail_local_rank": 1}
    if case == "lost":  # the pod lost must not host the rendezvous store (the soft policy's limit)
        # long enough for the new pod to start (a pod's start-up, then its workers' --init-s) while
        # the survivors train: its scale-up then comes between two steps, as on a cluster
        inputs.update(fail_pod=NOT_STORE_HOST_POD, fail_kind="vanish", finish_after_scale_up=True,
                      steps=args.lost_steps)
    elif case == "frozen":
        inputs.update(fail_pod=NOT_STORE_HOST_POD, fail_kind="freeze")
    else:
        inputs["fail_pod"] = "train-worker-1"
    if case == "failure-rfc":
        inputs["loop"] = "rfc"
    if case == "ends":
        inputs.update(init_s=args.ends_init_s, steps=args.fail_step + args.ends_steps_after)
    started = time.time()
    spec = JobSpec(task=task, nnodes=2, nproc_per_node=2, store=StoreAccess(str(work_dir / "store")),
                   inputs=inputs, timeout_s=300,
                   reschedule_lost_after_s=RESCHEDULE_AFTER_S if case == "lost" else None)
    result = run_job(spec, work_dir=work_dir)
    total = max(pod.exited_ns for pod in result.pods) / 1e9 - started
    # a frozen pod never ends by itself: the simulator kills it once the others are done
    judged = [pod for pod in result.pods if not (case == "frozen" and pod.name == result.injected_worker)]
    if result.timed_out or any(pod.returncode != 0 for pod in judged):
        raise RuntimeError(f"{case} {policy} trial failed; logs in {result.sim_dir}")
    return result, total


def _trial(case: str, policy: str, args: argparse.Namespace, work_dir: Path) -> dict[str, float]:
    result, total = _run(case, policy, args, work_dir)
    logs = read_worker_logs(result.sim_dir)
    failing = result.injected_worker or "train-worker-1"
    survivor = next(pod.name for pod in result.pods if pod.name != failing)
    fault = min(float(e["t"]) for local_rank in (0, 1) for e in _events(logs.get((failing, local_rank), []))
                if e["event"] == "fault")
    gaps, scale_up_gaps, lost, pids = [], [], [], set()
    for local_rank in (0, 1):
        events = _events(logs[(survivor, local_rank)])
        pids.update(int(e["pid"]) for e in events)
        steps = [e for e in events if e["event"] == "step"]
        before = [e for e in steps if float(e["t"]) <= fault]
        after = [e for e in steps if float(e["t"]) > fault]
        gaps.append(float(after[0]["t"]) - float(before[-1]["t"]))
        lost.append(int(before[-1]["step"]) - (int(after[0]["step"]) - 1))
        # a step must never go back: each process's steps only increase
        for process in logs[(survivor, local_rank)]:
            numbers = [int(e["step"]) for e in process if e["event"] == "step"]
            if policy == "soft" and numbers != sorted(set(numbers)):
                raise RuntimeError(f"a survivor's step went back: {numbers}; logs in {result.sim_dir}")
        grew = [e for e in events if e["event"] == "world" and e.get("change") == "SCALE_UP"]
        if grew:
            last = max(float(e["t"]) for e in steps if float(e["t"]) < float(grew[-1]["t"]))
            first = min(float(e["t"]) for e in steps if float(e["t"]) > float(grew[-1]["t"]))
            scale_up_gaps.append(first - last)
    # every rank trains again: each worker's first step after the fault, in a world of all 4 ranks
    firsts = [
        [float(e["t"]) for e in _events(processes)
         if e["event"] == "step" and float(e["t"]) > fault and int(e["world_size"]) == 4]
        for processes in logs.values()
    ]
    all_back = max(min(times) for times in firsts) if all(firsts) else float("nan")  # nan: training ended first
    return {
        "gap_at_failure_s": max(gaps),
        "gap_at_scale_up_s": max(scale_up_gaps) if scale_up_gaps else float("nan"),
        "all_ranks_back_s": all_back - fault,
        "steps_lost": float(max(lost)),
        "survivor_processes": float(len(pids)),
        "total_s": total,
    }


def _median(values: list[float]) -> float:
    values = [v for v in values if v == v]  # drop nan
    return statistics.median(values) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--init-s", type=float, default=3.0)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--step-s", type=float, default=0.1)
    parser.add_argument("--fail-step", type=int, default=10)
    parser.add_argument("--lost-steps", type=int, default=200)
    parser.add_argument("--ends-init-s", type=float, default=8.0)
    parser.add_argument("--ends-steps-after", type=int, default=20)
    parser.add_argument("--cases", default=",".join(sorted({case for case, _ in RUNS})),
                        help="comma-separated cases to run (default: all)")
    args = parser.parse_args()
    cases = set(args.cases.split(","))
    unknown = cases - {case for case, _ in RUNS}
    if unknown:
        parser.error(f"unknown cases: {', '.join(sorted(unknown))}")
    runs = tuple(run for run in RUNS if run[0] in cases)
    results: dict[tuple[str, str], list[dict[str, float]]] = {run: [] for run in runs}
    tmp = tempfile.mkdtemp(prefix="bench-soft-restart-")  # kept when a trial fails: its pod logs are there
    for trial in range(args.trials):
        for case, policy in runs:
            work_dir = Path(tmp) / f"{case}-{policy}-{trial}"
            work_dir.mkdir()
            results[(case, policy)].append(_trial(case, policy, args, work_dir))
            print(f"trial {trial + 1} {case} {policy}: " + ", ".join(
                f"{key} {value:.2f}" for key, value in results[(case, policy)][-1].items()), flush=True)
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n2 pods x 2 spawned workers, init {args.init_s:g} s per worker start, {args.steps} steps of "
          f"{args.step_s:g} s, fault at step {args.fail_step}; every trial succeeded; medians (max) of "
          f"{args.trials} trials")
    print(f"{'':36} " + " ".join(f"{f'{case} {policy}':>20}" for case, policy in runs))
    for key, label in METRICS:
        cells = []
        for run in runs:
            values = [r[key] for r in results[run]]
            finite = [v for v in values if v == v]
            cells.append(f"{_median(values):8.2f} ({max(finite):6.2f})" if finite else f"{'-':>17}")
        print(f"{label:36} " + " ".join(f"{cell:>20}" for cell in cells))


if __name__ == "__main__":
    main()
