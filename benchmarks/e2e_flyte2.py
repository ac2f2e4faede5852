"""End-to-end accuracy on Flyte 2: the action's ``error.pb``, this plugin vs upstream ``flyteplugins.pytorch``.

Run by hand: ``.venv/bin/python -m benchmarks.e2e_flyte2 [--trials 5] [--kinds raise,sigkill,vanish]
[--nnodes 4] [--no-baseline | --baseline-only] [--default-restarts]`` (default: every kind of
``benchmarks/fault_kinds.py``, 2 pods, ``max_restarts=0``).

Each trial runs a simulated Flyte 2 PyTorchJob of ``--nnodes`` pods x 2 workers (8 pods: x 1)
(``rootcause_harness.flyte2``: every pod the real ``a0`` entrypoint, local folders as the
bucket, all pods writing the one output prefix of the action) with one fault, twice on the same
fault: with this plugin's ``ElasticRootCause`` and with upstream ``Elastic``. What is judged is the
action's ``error.pb``, the one file Flyte 2's backend reads, whatever pod wrote it last:

- **this plugin**: the pod and rank on the agreed report's first marked line;
- **upstream Elastic**: ``ContainerError`` names no pod, so the first rank its ``RuntimeError``
  lists, and the pod the rendezvous gave that rank; a missing ``error.pb`` (a pod force-exited by
  the zombie watchdog writes none) or a torn one (pods writing different bytes to the one local
  file at once) is wrong, and counted as such.

With ``--default-restarts`` (2 pods; the kinds that do not hang, nor a vanished pod) both tasks keep ``Elastic``'s
default ``max_restarts`` (3), which Flyte 2 users get unless they set it: every worker restarts three
times, the fault recurring at its step in each attempt, and the job fails with its last attempt.

A trial is correct when the named pod is the faulty one and the named rank the faulty rank (for a
vanished or frozen pod, the pod alone). Printed per kind: the share correct and the median/p90 time
from the fault to the last pod's exit. A frozen pod's baseline, which would wait out gloo's 30-minute
collective timeout, is given ``FREEZE_BASELINE_S``.
"""

from __future__ import annotations

import argparse
import functools
import logging
import tempfile
from pathlib import Path

from flyte._task import TaskTemplate

from benchmarks.fault_kinds import (
    KINDS,
    NPROC_PER_NODE,
    POD_ONLY_KINDS,
    decision_cell,
    fault_for,
    fault_to_decision_s,
    job_limits,
    quantiles,
    right_at_decision,
)
from rootcause_harness.flyte2 import training
from rootcause_harness.flyte2.console import console_at_decision
from rootcause_harness.flyte2.job import JobResult, JobSpec, run_job
from rootcause_harness.flyte2.verdict import Verdict, rootcause_verdict, upstream_verdict

#: How long the baseline gets with a frozen pod.
FREEZE_BASELINE_S = 60.0
#: (plugin, baseline) tasks per pod count; a hang surfaces only with a short collective timeout.
TASKS: dict[tuple[int, str], tuple[TaskTemplate, TaskTemplate]] = {
    (2, "any"): (training.train_2x2, training.train_2x2_elastic),
    (2, "hang"): (training.train_2x2_short_timeout, training.train_2x2_elastic_short_timeout),
    (4, "any"): (training.train_4x2, training.train_4x2_elastic),
    (4, "hang"): (training.train_4x2_short_timeout, training.train_4x2_elastic_short_timeout),
    (8, "any"): (training.train_8x1, training.train_8x1_elastic),
    (8, "hang"): (training.train_8x1_short_timeout, training.train_8x1_elastic_short_timeout),
}


#: (plugin, baseline) tasks with ``Elastic``'s default ``max_restarts``, 2 pods.
RESTARTING_TASKS = (training.train_2x2_restarting, training.train_2x2_elastic_restarting)
#: Kinds not run with restarts: those that need a short collective timeout or a pod that never
#: answers, and a vanished pod, which the simulator does not create again as the training operator
#: would: the survivors' restart waits in torch's rendezvous for it (its join timeout, 600 s), with
#: either plugin (3 trials each: every job reached the simulator's 240 s limit).
NOT_WITH_RESTARTS = ("init-hang", "freeze", "vanish")


def verdict(result: JobResult, ours: bool) -> Verdict:
    document = result.error_document
    if document is None:
        return None, None
    message = document.error.message
    return rootcause_verdict(message) if ours else upstream_verdict(message, result.placement)


def is_right(named: Verdict, result: JobResult, kind: str) -> bool:
    worker, rank = named
    return worker == result.injected_worker and (kind in POD_ONLY_KINDS or rank == result.injected_rank)


def run_kind(kind: str, trials: int, root: Path, nnodes: int, baseline: bool, restarting: bool = False,
             decision_only: bool = False, plugin: bool = True) -> None:
    if restarting:
        plugin_task, baseline_task = RESTARTING_TASKS
    else:
        plugin_task, baseline_task = TASKS.get((nnodes, kind.split("-")[0]), TASKS[(nnodes, "any")])
    runs = ([("plugin", plugin_task)] if plugin else []) + ([("baseline", baseline_task)] if baseline else [])
    outcomes: dict[str, list[tuple[bool, float | None, str]]] = {"plugin": [], "baseline": []}
    decided: dict[str, list[tuple[bool, float | None, str]]] = {"plugin": [], "baseline": []}
    for trial in range(trials):
        fault = fault_for(kind, trial, nnodes)
        for label, task in runs:
            limit = job_limits(kind, label, decision_only=decision_only, freeze_baseline_s=FREEZE_BASELINE_S)
            spec = JobSpec(task=task, nnodes=nnodes, nproc_per_node=NPROC_PER_NODE[nnodes], root=root / "bucket",
                           fault=fault, **limit)
            result = run_job(spec, work_dir=root / "pods")
            named = verdict(result, ours=label == "plugin")
            outcomes[label].append((is_right(named, result, kind), result.fault_to_exit_s, result.error_pb))
            read = rootcause_verdict if label == "plugin" else functools.partial(
                upstream_verdict, placement=result.placement)
            view = console_at_decision(result, read)
            injected = (result.injected_worker, result.injected_rank)
            decided[label].append((right_at_decision(view, injected, kind),
                                   fault_to_decision_s(result.operator.decided_ns, result.fault_ns), view.outcome))
    cells = []
    for label in ("plugin", "baseline"):
        if not outcomes[label]:
            cells += ["not run", "not run"]
            continue
        ok = sum(correct for correct, _, _ in outcomes[label])
        states = [state for _, _, state in outcomes[label]]
        bad = "".join(f", {states.count(state)} {state}" for state in ("missing", "torn") if state in states)
        times = [t for _, t, _ in outcomes[label] if t is not None]
        cells.append(f"{ok}/{trials} ({100 * ok / trials:.0f}%){bad}, {quantiles(times)}")
        cells.append(decision_cell(decided[label], trials))
    print(f"{kind:<20} " + " | ".join(cells), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--nnodes", type=int, choices=sorted({n for n, _ in TASKS}), default=2)
    jobs = parser.add_mutually_exclusive_group()
    jobs.add_argument("--no-baseline", action="store_true", help="run only this plugin's jobs")
    jobs.add_argument("--baseline-only", action="store_true", help="run only the baseline's jobs")
    parser.add_argument("--decision-only", action="store_true",
                        help="delete the pods 1 s after the operator's decision, as Flyte deletes a finished job "
                             "(only the columns at the decision count)")
    parser.add_argument("--default-restarts", action="store_true",
                        help="Elastic's default max_restarts (3), not 0; 2 pods, kinds that do not hang or vanish")
    args = parser.parse_args()
    unknown = [kind for kind in args.kinds.split(",") if kind not in KINDS]
    if unknown:
        parser.error(f"unknown fault kinds {unknown}; choose from {', '.join(KINDS)}")
    if args.default_restarts:
        hanging = [kind for kind in args.kinds.split(",") if kind.split("-")[0] == "hang" or kind in NOT_WITH_RESTARTS]
        if args.nnodes != 2 or hanging:
            parser.error(f"--default-restarts runs 2 pods and no hang, freeze or vanish kinds (asked: {hanging})")
    logging.disable(logging.CRITICAL)
    root = Path(tempfile.mkdtemp(prefix="rootcause-e2e-flyte2-"))
    restarts = "Elastic's default max_restarts (3)" if args.default_restarts else "max_restarts=0"
    shape = f"{args.nnodes} pods x {NPROC_PER_NODE[args.nnodes]} workers"
    print(f"{args.trials} trials per kind; {shape} through a0, {restarts}; the action's "
          "error.pb names the faulty pod and rank; median/p90 fault -> all pods exited")
    print(f"{'fault':<20} ElasticRootCause: after the last exit | at the operator's decision (right, fault -> "
          "decision) | flyteplugins.pytorch.Elastic: after the last exit | at the operator's decision")
    for kind in args.kinds.split(","):
        run_kind(kind, args.trials, root, args.nnodes, baseline=not args.no_baseline,
                 restarting=args.default_restarts, decision_only=args.decision_only, plugin=not args.baseline_only)


if __name__ == "__main__":
    main()
