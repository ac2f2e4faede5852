"""End-to-end accuracy and time to exit: this plugin vs flytekit's Elastic + pyflyte-execute + Go's rule.

Run by hand: ``.venv/bin/python -m benchmarks.e2e [--trials 20] [--kinds raise,sigkill,vanish]
[--nnodes 4] [--no-baseline | --baseline-only]`` (default: all kinds, 2 pods, baseline included).

Each trial runs a simulated PyTorchJob of ``--nnodes`` pods x 2 workers (8 pods: x 1)
(``rootcause_harness.flytekit``) with one fault, twice:

- **this plugin**: the ``ElasticRootCause`` task, started by ``pyflyte-rootcause-execute`` (its
  serialized container args), decided by ``backend_reader`` (strategy earliest, our rule) and, on
  the same files, by Flyte's Go rule (what the console shows with aggregation on);
- **baseline**: the same training under kfpytorch's ``Elastic`` with flytekit's ``pyflyte-execute``
  and propeller's aggregation on (``FLYTE_INTERNAL_DIST_ERROR_STRATEGY`` set, so every pod writes
  ``error-<uuid>.pb``), decided by Flyte's Go reading rule: list ``error*.pb``, earliest timestamp,
  a missing timestamp counts as 1970, ties by file name.

Fault kinds: raise, sigkill, sigabrt, sigsegv (a real segfault), exit (``os._exit(3)``: no
exception, no signal), ordering (two independent errors 50 ms apart), skew (a raise in a pod whose
wall clock runs 1 s ahead of the others'), vanish (every process of the
faulty pod SIGKILLed at once, as when its node is lost: it writes nothing; its peers must name it),
freeze (every process of the faulty pod, the store host's in every other trial, SIGSTOPped at once,
as when its node freezes or drops off the network: its sockets stay open, so no collective fails;
its peers must notice its silence; the baseline, which would wait for gloo's 30-minute collective
timeout, is given ``FREEZE_BASELINE_S``),
hang (one rank sleeps; its peers time out in the next all-reduce after 3 s), hang-<call> (the same,
the step communicating by a broadcast whose root or a receiver hangs, a barrier, an all-gather, a
reduce-scatter, or a ring of send/recv: ``simulation.faults.Communication``) and init-hang (one
rank sleeps before ``init_process_group``; its peers stop waiting for its store key after 20 s),
preempt (the kubelet SIGTERMs the faulty pod's main process, SIGKILL after the grace) and
preempt-rendezvous (the same while its agent is in the rendezvous, no worker started; the store host's
in every other trial, which takes the store with it). A trial is correct
when the decided worker is the pod the fault was injected into *and* the rank its report names is
the faulty one (the rendezvous decides ranks; the simulator records them; the baseline's rank is
the one torch's ``ChildFailedError`` report names as its root cause); for a vanished pod, whose
document its peers write for the whole pod (and for a frozen one), the pod alone. Printed: the
share correct per fault kind, the median and p90 time from the fault to the last pod's exit, and for
this plugin where that time goes, for the faulty pod and for the last pod to exit: fault -> its
agent noticed the failure, -> its surviving workers ended, -> its root-cause report was raised (all
three from the agent timeline line of the pod's error document), -> the error document uploaded
(its modification time), -> the pod process exited.
"""

from __future__ import annotations

import argparse
import datetime
import logging
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

import fsspec
from flyteidl.core import errors_pb2
from flytekit.core.base_task import PythonTask

from backend_reader import RemoteFileOutputReader
from backend_reader.upstream_rule import UpstreamReadError, earliest_error
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
from rootcause_core.roles import rank_from_report
from rootcause_harness.flytekit.console import console_at_decision
from rootcause_harness.flytekit.job import JobResult, JobSpec, StoreAccess, run_job
from rootcause_harness.flytekit.training import (
    train_2x2,
    train_2x2_elastic,
    train_2x2_elastic_short_timeout,
    train_2x2_short_timeout,
    train_4x2,
    train_4x2_elastic,
    train_4x2_elastic_short_timeout,
    train_4x2_short_timeout,
    train_8x1,
    train_8x1_elastic,
    train_8x1_elastic_short_timeout,
    train_8x1_short_timeout,
)

#: What a reader decided: the pod it names, and the global rank its report names (None: no rank).
Verdict = tuple[str | None, int | None]


#: torch's ``ChildFailedError`` report (what kfpytorch's ``Elastic`` puts in its error): the first
#: entry under "Root Cause (first observed failure):" has a line ``rank      : 1 (local_rank: 1)``.
_TORCH_ROOT_CAUSE_RANK_RE = re.compile(
    r"Root Cause \(first observed failure\):.*?\brank\s*:\s*(\d+) \(local_rank", re.DOTALL
)


def torch_report_rank(message: str) -> int | None:
    """The global rank torch's own failure report names as its root cause (the baseline's errors)."""
    match = _TORCH_ROOT_CAUSE_RANK_RE.search(message)
    return int(match.group(1)) if match else None


def go_rule_verdict(result: JobResult, rank_of: Callable[[str], int | None] = rank_from_report) -> Verdict:
    """What Flyte's Go reader names with the Earliest strategy (``backend_reader.upstream_rule``): the
    pod, and the rank its message names (``rank_of``: this plugin's report line by default);
    ``(None, None)`` when it would fail the read."""
    try:
        pick = earliest_error(result.output_prefix, fsspec.filesystem("file"))
    except UpstreamReadError:
        return None, None
    return (None, None) if pick is None else (pick.worker, rank_of(pick.message))


def baseline_verdict(result: JobResult) -> Verdict:
    """Go's rule on kfpytorch ``Elastic``'s files: the rank is the one torch's report names."""
    return go_rule_verdict(result, rank_of=torch_report_rank)


def ours_verdict(result: JobResult) -> Verdict:
    read = RemoteFileOutputReader(
        result.output_prefix, expected_workers=result.spec.nnodes, settle_timeout=10
    ).read_all()
    return (read.failures[0].worker, read.failures[0].global_rank) if read.failures else (None, None)


def is_right(verdict: Verdict, result: JobResult, kind: str) -> bool:
    """The faulty pod, and (but for a vanished pod) the faulty rank."""
    worker, rank = verdict
    return worker == result.injected_worker and (kind in POD_ONLY_KINDS or rank == result.injected_rank)


#: How long the baseline gets with a frozen pod (it would wait out gloo's 30-minute collective timeout).
FREEZE_BASELINE_S = 60.0
#: (plugin, baseline) tasks per pod count, and for a kind that needs its own: a hang surfaces only
#: with a short collective timeout.
TASKS: dict[tuple[int, str], tuple[PythonTask, PythonTask]] = {
    (2, "any"): (train_2x2, train_2x2_elastic),
    (2, "hang"): (train_2x2_short_timeout, train_2x2_elastic_short_timeout),
    (4, "any"): (train_4x2, train_4x2_elastic),
    (4, "hang"): (train_4x2_short_timeout, train_4x2_elastic_short_timeout),
    (8, "any"): (train_8x1, train_8x1_elastic),
    (8, "hang"): (train_8x1_short_timeout, train_8x1_elastic_short_timeout),
}


_TIMELINE_RE = re.compile(r"Agent timeline \(after the root cause\): (.*)")
_STEP_RE = re.compile(r"(noticed the failure|survivors ended|reported) ([+-][0-9.]+) s")
_WHEN_RE = re.compile(r" failed at (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\.(\d{9})Z")
PHASES = ("noticed", "ended", "reported", "uploaded", "exited")


def pod_phases(result: JobResult) -> dict[str, dict[str, float]]:
    """Per pod, seconds from the fault to: its agent noticing, survivors ended, report, upload, exit.

    Read from what a pod leaves: the agent timeline line of its error document (offsets from that
    document's root-cause time), the document's modification time (upload) and the pod's exit.
    """
    fault = result.fault_ns or 0
    phases: dict[str, dict[str, float]] = {pod.name: {"exited": (pod.exited_ns - fault) / 1e9} for pod in result.pods}
    fs = fsspec.filesystem("file")
    for path in fs.glob(f"{result.output_prefix}/error-*.pb"):
        document = errors_pb2.ErrorDocument()
        document.ParseFromString(fs.cat_file(path))
        pod = document.error.worker
        if pod not in phases:
            continue
        phases[pod]["uploaded"] = (fs.info(path)["mtime"] * 1e9 - fault) / 1e9
        message = document.error.message
        when, timeline = _WHEN_RE.search(message), _TIMELINE_RE.search(message)
        if when is None or timeline is None:
            continue
        moment = datetime.datetime.strptime(when.group(1), "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.UTC)
        root_ns = int(moment.timestamp()) * 1_000_000_000 + int(when.group(2))
        names = {"noticed the failure": "noticed", "survivors ended": "ended", "reported": "reported"}
        for name, offset in _STEP_RE.findall(timeline.group(1)):
            phases[pod][names[name]] = (root_ns - fault) / 1e9 + float(offset)
    return phases


def run_kind(kind: str, trials: int, root: Path, nnodes: int = 2, baseline: bool = True,
             decision_only: bool = False, plugin: bool = True) -> None:
    outcomes: dict[str, list[tuple[bool, float | None]]] = {"plugin": [], "baseline": []}
    decided: dict[str, list[tuple[bool, float | None, str]]] = {"plugin": [], "baseline": []}
    console_right = 0  # Go's rule on this plugin's files
    breakdown: dict[str, dict[str, list[float]]] = {"faulty pod": {}, "last pod": {}}
    plugin_task, baseline_task = TASKS.get((nnodes, kind.split("-")[0]), TASKS[(nnodes, "any")])
    runs = [("plugin", plugin_task, False, ours_verdict)] if plugin else []
    if baseline:
        runs.append(("baseline", baseline_task, True, baseline_verdict))
    for trial in range(trials):
        fault = fault_for(kind, trial, nnodes)
        for label, task, aggregation, decide in runs:
            limit = job_limits(kind, label, decision_only=decision_only, freeze_baseline_s=FREEZE_BASELINE_S)
            spec = JobSpec(task=task, nnodes=nnodes, nproc_per_node=NPROC_PER_NODE[nnodes],
                           store=StoreAccess(str(root / "store")), fault=fault, aggregation=aggregation, **limit)
            result = run_job(spec, work_dir=root / "pods")
            outcomes[label].append((is_right(decide(result), result, kind), result.fault_to_exit_s))
            rank_of = rank_from_report if label == "plugin" else torch_report_rank
            view = console_at_decision(result, aggregation=True, rank_of=rank_of)
            decided[label].append((right_at_decision(view, (result.injected_worker, result.injected_rank), kind),
                                   fault_to_decision_s(result.operator.decided_ns, result.fault_ns), view.outcome))
            if label == "plugin":
                console_right += is_right(go_rule_verdict(result), result, kind)
            if label == "plugin" and result.fault_ns is not None:
                phases = pod_phases(result)
                last = max(result.pods, key=lambda pod: pod.exited_ns).name
                faulty = result.injected_worker or fault.pod
                for which, pod in (("faulty pod", faulty), ("last pod", last)):
                    for phase, seconds in phases.get(pod, {}).items():
                        if pod == faulty and phase in ("noticed", "ended", "reported"):
                            seconds -= fault.clock_offset_s  # read off the skewed pod's own clock
                        breakdown[which].setdefault(phase, []).append(seconds)
    cells = []
    for label in ("plugin", "baseline"):
        if not outcomes[label]:
            cells += ["not run", "not run"]
            continue
        ok = sum(correct for correct, _ in outcomes[label])
        times = [t for _, t in outcomes[label] if t is not None]
        cells.append(f"{ok}/{trials} ({100 * ok / trials:.0f}%), {quantiles(times)}")
        cells.append(decision_cell(decided[label], trials))
    console = f"{console_right}/{trials} ({100 * console_right / trials:.0f}%)" if plugin else "not run"
    print(f"{kind:<10} {cells[0]} | Go rule after the last exit {console} | at the decision {cells[1]} | "
          f"baseline {cells[2]} | baseline at the decision {cells[3]}", flush=True)
    for which, phases in breakdown.items():
        row = " ".join(f"{phase} {quantiles(phases.get(phase, []))}" for phase in PHASES)
        print(f"{'':<10}   {which:<10} fault -> {row}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--nnodes", type=int, choices=sorted({n for n, _ in TASKS}), default=2)
    jobs = parser.add_mutually_exclusive_group()
    jobs.add_argument("--no-baseline", action="store_true", help="run only this plugin's jobs")
    jobs.add_argument("--baseline-only", action="store_true", help="run only the baseline's jobs")
    parser.add_argument("--decision-only", action="store_true",
                        help="delete the pods 1 s after the operator's decision, as Flyte deletes a finished job "
                             "(only the columns at the decision count)")
    args = parser.parse_args()
    logging.disable(logging.CRITICAL)
    root = Path(tempfile.mkdtemp(prefix="rootcause-e2e-"))
    shape = f"{args.nnodes} pods x {NPROC_PER_NODE[args.nnodes]} workers"
    print(f"{args.trials} trials per kind; {shape}; correct pod and rank, "
          "median/p90 fault -> all pods exited")
    print("breakdown (this plugin, median/p90 from the fault): the faulty pod and the last pod to exit")
    print("per kind: this plugin (our reader after the last exit) | the Go rule on its files after the last exit | "
          "at the operator's decision (Go rule, aggregation on: right, how the wrong ones read, fault -> decision) "
          "| kfpytorch Elastic + Go rule after the last exit | the same at the operator's decision")
    for kind in args.kinds.split(","):
        run_kind(kind, args.trials, root, args.nnodes, baseline=not args.no_baseline,
                 decision_only=args.decision_only, plugin=not args.baseline_only)


if __name__ == "__main__":
    main()
