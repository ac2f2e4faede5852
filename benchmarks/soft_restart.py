"""Soft vs hard restart of a simulated 2-pod x 2-worker PyTorchJob: what the survivors pay.

Run by hand: ``.venv/bin/python -m benchmarks.soft_restart [--trials 3] [--init-s 3] [--steps 80]``.

Each trial runs the simulator's soft-restart training task (``simulation/soft_training.py``: every
worker sleeps ``--init-s`` first, standing in for loading a model, then trains ``--steps`` steps of
``--step-s``); worker 1 of pod 1 raises a recoverable error at step ``--fail-step``. For
``restart_policy="hard"`` (torch's) and ``"soft"``, in the same run, from the workers' own logs:

- survivors' gap at the failure: a pod-0 worker's last step before the fault to its next step;
- survivors' gap at the scale-up (soft): the step before the world grew back to the next one;
- time until all ranks train again: fault to the moment every rank has stepped after it (hard: the
  restarted attempt's first steps; soft: the world with the restarted pod back);
- steps lost: steps the survivors did before the fault and had to do again;
- total job time: first pod start to last pod exit.

The hard runs set ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``: with torch 2.13's shared rendezvous
store, restarted workers of a multi-pod job read the previous attempt's stale keys and never finish
``init_process_group`` (plain kfpytorch ``Elastic`` too), so without it hard restarts never recover.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from flytekitplugins_rootcause.simulation.pytorchjob import JobSpec, StoreAccess, run_job
from flytekitplugins_rootcause.simulation.soft_training import hard_train_2x2, read_worker_logs, soft_train_2x2

FAILING_POD = "train-worker-1"
SURVIVOR_POD = "train-worker-0"


def _events(processes: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [event for events in processes for event in events]


def _trial(policy: str, args: argparse.Namespace, work_dir: Path) -> dict[str, float]:
    task = soft_train_2x2 if policy == "soft" else hard_train_2x2
    inputs = {"steps": args.steps, "init_s": args.init_s, "step_s": args.step_s, "fail_pod": FAILING_POD,
              "fail_local_rank": 1, "fail_step": args.fail_step}
    previous = os.environ.get("TORCH_DISABLE_SHARE_RDZV_TCP_STORE")
    if policy == "hard":
        os.environ["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    try:
        started = time.time()
        result = run_job(JobSpec(task=task, nnodes=2, nproc_per_node=2, store=StoreAccess(str(work_dir / "store")),
                                 inputs=inputs, timeout_s=300), work_dir=work_dir)
        total = max(pod.exited_ns for pod in result.pods) / 1e9 - started
    finally:
        if previous is None:
            os.environ.pop("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", None)
        else:
            os.environ["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = previous
    if result.timed_out or any(pod.returncode != 0 for pod in result.pods):
        raise RuntimeError(f"{policy} trial failed; logs in {result.sim_dir}")
    logs = read_worker_logs(result.sim_dir)
    fault = min(float(e["t"]) for e in _events(logs[(FAILING_POD, 1)]) if e["event"] == "fault")
    gaps, scale_up_gaps, lost, pids = [], [], [], set()
    for local_rank in (0, 1):
        processes = logs[(SURVIVOR_POD, local_rank)]
        events = _events(processes)
        pids.update(int(e["pid"]) for e in events)
        steps = [e for e in events if e["event"] == "step"]
        before = [e for e in steps if float(e["t"]) <= fault]
        after = [e for e in steps if float(e["t"]) > fault]
        gaps.append(float(after[0]["t"]) - float(before[-1]["t"]))
        lost.append(int(before[-1]["step"]) - (int(after[0]["step"]) - 1))
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
    return statistics.median(values) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--init-s", type=float, default=3.0)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--step-s", type=float, default=0.1)
    parser.add_argument("--fail-step", type=int, default=10)
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {"hard": [], "soft": []}
    tmp = tempfile.mkdtemp(prefix="bench-soft-restart-")  # kept when a trial fails: its pod logs are there
    for trial in range(args.trials):
        for policy in ("hard", "soft"):
            work_dir = Path(tmp) / f"{policy}-{trial}"
            work_dir.mkdir()
            results[policy].append(_trial(policy, args, work_dir))
            print(f"trial {trial + 1} {policy}: " + ", ".join(
                f"{key} {value:.2f}" for key, value in results[policy][-1].items()), flush=True)
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n2 pods x 2 workers, init {args.init_s:g} s per worker start, {args.steps} steps of {args.step_s:g} s, "
          f"failure at step {args.fail_step} on {FAILING_POD}; medians of {args.trials} trials")
    print(f"{'':34} {'hard':>10} {'soft':>10}")
    for key, label in (("gap_at_failure_s", "survivors' gap at the failure (s)"),
                       ("gap_at_scale_up_s", "survivors' gap at the scale-up (s)"),
                       ("all_ranks_back_s", "fault -> all ranks train again (s)"),
                       ("steps_lost", "survivors' steps lost"),
                       ("survivor_processes", "survivor pod's worker processes"),
                       ("total_s", "total job time (s)")):
        hard, soft = (_median([r[key] for r in results[p]]) for p in ("hard", "soft"))
        print(f"{label:34} {hard:>10.2f} {soft:>10.2f}")
    hard_gap = _median([r["gap_at_failure_s"] for r in results["hard"]])
    soft_gap = _median([r["gap_at_failure_s"] for r in results["soft"]])
    print(f"survivors' gap at the failure: soft is {hard_gap / soft_gap:.1f}x shorter than hard")


if __name__ == "__main__":
    main()
