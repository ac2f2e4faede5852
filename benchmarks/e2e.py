"""End-to-end accuracy and time to exit: this plugin vs flytekit's Elastic + pyflyte-execute + Go's rule.

Run by hand: ``.venv/bin/python -m benchmarks.e2e [--trials 20] [--kinds raise,sigkill,vanish]`` (default: all kinds).

Each trial runs a simulated 2-pod x 2-worker PyTorchJob (``flytekitplugins_rootcause.simulation``)
with one fault, twice:

- **this plugin**: the ``ElasticRootCause`` task, started by ``pyflyte-rootcause-execute`` (its
  serialized container args), decided by ``backend_reader`` (strategy earliest, our rule) and, on
  the same files, by Flyte's Go rule (what the console shows with aggregation on);
- **baseline**: the same training under kfpytorch's ``Elastic`` with flytekit's ``pyflyte-execute``
  and propeller's aggregation on (``FLYTE_INTERNAL_DIST_ERROR_STRATEGY`` set, so every pod writes
  ``error-<uuid>.pb``), decided by Flyte's Go reading rule: list ``error*.pb``, earliest timestamp,
  a missing timestamp counts as 1970, ties by file name.

Fault kinds: raise, sigkill, sigabrt, ordering (two independent errors 50 ms apart), skew (a
raise in a pod whose wall clock runs 1 s ahead of the others'), and vanish (every process of the
faulty pod SIGKILLed at once, as when its node is lost: it writes nothing; its peers must name it).
A trial is correct when the decided worker is the pod the fault was injected into. Printed: the
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
import statistics
import tempfile
from pathlib import Path

import fsspec
from flyteidl.core import errors_pb2
from flytekit.core.base_task import PythonTask

from backend_reader import RemoteFileOutputReader
from backend_reader.upstream_rule import UpstreamReadError, earliest_error
from flytekitplugins_rootcause.simulation.faults import Fault, FaultKind
from flytekitplugins_rootcause.simulation.pytorchjob import JobResult, JobSpec, StoreAccess, run_job
from flytekitplugins_rootcause.simulation.training import (
    train_2x2,
    train_2x2_elastic,
    train_2x2_elastic_short_timeout,
    train_2x2_short_timeout,
)


def go_rule_worker(output_prefix: str) -> str | None:
    """The worker Flyte's Go reader names with the Earliest strategy (``backend_reader.upstream_rule``);
    ``None`` when it would fail the read or finds no error file."""
    try:
        pick = earliest_error(output_prefix, fsspec.filesystem("file"))
    except UpstreamReadError:
        return None
    return None if pick is None else pick.worker


def ours_worker(result: JobResult) -> str | None:
    read = RemoteFileOutputReader(result.output_prefix, expected_workers=2, settle_timeout=10).read_all()
    return read.failures[0].worker if read.failures else None


#: Benchmark fault kinds: the simulator's fault, and how far the faulty pod's clock runs ahead.
KINDS: dict[str, tuple[FaultKind, float]] = {
    "raise": (FaultKind.RAISE, 0.0),
    "sigkill": (FaultKind.SIGKILL, 0.0),
    "sigabrt": (FaultKind.SIGABRT, 0.0),
    "ordering": (FaultKind.ORDERING, 0.0),
    "skew": (FaultKind.RAISE, 1.0),
    "vanish": (FaultKind.VANISH, 0.0),  # the whole faulty pod killed at once (a lost node)
    "hang": (FaultKind.HANG, 0.0),  # one rank sleeps; its peers time out in the next all-reduce (3 s)
}
#: The (plugin, baseline) tasks of a kind: a hang needs a short collective timeout to surface.
TASKS: dict[str, tuple[PythonTask, PythonTask]] = {"hang": (train_2x2_short_timeout, train_2x2_elastic_short_timeout)}


def fault_for(kind: str, trial: int) -> Fault:
    """Alternate the faulty pod between trials so neither pod is favoured."""
    fault_kind, clock_offset_s = KINDS[kind]
    pod, other = ("train-worker-1", "train-worker-0") if trial % 2 == 0 else ("train-worker-0", "train-worker-1")
    return Fault(fault_kind, pod=pod, local_rank=trial % 2, second_pod=other, second_local_rank=0,
                 clock_offset_s=clock_offset_s)


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


def _quantiles(values: list[float]) -> str:
    if not values:
        return f"{'n/a':>13}"
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return f"{statistics.median(ordered):5.2f}/{p90:5.2f} s"


def run_kind(kind: str, trials: int, root: Path) -> None:
    outcomes: dict[str, list[tuple[bool, float | None]]] = {"plugin": [], "baseline": []}
    console_right = 0  # Go's rule on this plugin's files
    breakdown: dict[str, dict[str, list[float]]] = {"faulty pod": {}, "last pod": {}}
    for trial in range(trials):
        fault = fault_for(kind, trial)
        plugin_task, baseline_task = TASKS.get(kind, (train_2x2, train_2x2_elastic))
        for label, task, aggregation, decide in (
            ("plugin", plugin_task, False, ours_worker),
            ("baseline", baseline_task, True, lambda r: go_rule_worker(r.output_prefix)),
        ):
            spec = JobSpec(task=task, nnodes=2, nproc_per_node=2, store=StoreAccess(str(root / "store")),
                           fault=fault, aggregation=aggregation)
            result = run_job(spec, work_dir=root / "pods")
            outcomes[label].append((decide(result) == result.injected_worker, result.fault_to_exit_s))
            if label == "plugin":
                console_right += go_rule_worker(result.output_prefix) == result.injected_worker
            if label == "plugin" and result.fault_ns is not None:
                phases = pod_phases(result)
                last = max(result.pods, key=lambda pod: pod.exited_ns).name
                for which, pod in (("faulty pod", fault.pod), ("last pod", last)):
                    for phase, seconds in phases.get(pod, {}).items():
                        if pod == fault.pod and phase in ("noticed", "ended", "reported"):
                            seconds -= fault.clock_offset_s  # read off the skewed pod's own clock
                        breakdown[which].setdefault(phase, []).append(seconds)
    cells = []
    for label in ("plugin", "baseline"):
        ok = sum(correct for correct, _ in outcomes[label])
        times = [t for _, t in outcomes[label] if t is not None]
        cells.append(f"{ok}/{trials} ({100 * ok / trials:.0f}%), {_quantiles(times)}")
    console = f"{console_right}/{trials} ({100 * console_right / trials:.0f}%)"
    print(f"{kind:<10} {cells[0]:>30} {console:>16} {cells[1]:>30}", flush=True)
    for which, phases in breakdown.items():
        row = " ".join(f"{phase} {_quantiles(phases.get(phase, []))}" for phase in PHASES)
        print(f"{'':<10}   {which:<10} fault -> {row}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--kinds", default=",".join(KINDS))
    args = parser.parse_args()
    logging.disable(logging.CRITICAL)
    root = Path(tempfile.mkdtemp(prefix="rootcause-e2e-"))
    print(f"{args.trials} trials per kind; 2 pods x 2 workers; correct worker, median/p90 fault -> all pods exited")
    print("breakdown (this plugin, median/p90 from the fault): the faulty pod and the last pod to exit")
    print(f"{'fault':<10} {'this plugin (our reader)':>30} {'Go rule, ours':>16} {'Elastic + Go rule':>30}")
    for kind in args.kinds.split(","):
        run_kind(kind, args.trials, root)


if __name__ == "__main__":
    main()
