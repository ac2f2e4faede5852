"""End-to-end accuracy and time to exit: this plugin vs flytekit's Elastic + pyflyte-execute + Go's rule.

Run by hand: ``.venv/bin/python -m benchmarks.e2e [--trials 20] [--kinds raise,sigkill,sigabrt,ordering]``.

Each trial runs a simulated 2-pod x 2-worker PyTorchJob (``flytekitplugins_rootcause.simulation``)
with one fault, twice:

- **this plugin**: the ``ElasticRootCause`` task, started by ``pyflyte-rootcause-execute`` (its
  serialized container args), decided by ``backend_reader`` (strategy earliest, our rule);
- **baseline**: the same training under kfpytorch's ``Elastic`` with flytekit's ``pyflyte-execute``
  and propeller's aggregation on (``FLYTE_INTERNAL_DIST_ERROR_STRATEGY`` set, so every pod writes
  ``error-<uuid>.pb``), decided by Flyte's Go reading rule: list ``error*.pb``, earliest timestamp,
  a missing timestamp counts as 1970, ties by file name.

A trial is correct when the decided worker is the pod the fault was injected into. Printed: the
share correct per fault kind, and the median time from the fault to the last pod's exit.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
from pathlib import Path

import fsspec

from backend_reader import RemoteFileOutputReader
from backend_reader.upstream_rule import UpstreamReadError, earliest_error
from flytekitplugins_rootcause.simulation.faults import Fault, FaultKind
from flytekitplugins_rootcause.simulation.pytorchjob import JobResult, JobSpec, StoreAccess, run_job
from flytekitplugins_rootcause.simulation.training import train_2x2, train_2x2_elastic


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


def fault_for(kind: FaultKind, trial: int) -> Fault:
    """Alternate the faulty pod between trials so neither pod is favoured."""
    pod, other = ("train-worker-1", "train-worker-0") if trial % 2 == 0 else ("train-worker-0", "train-worker-1")
    return Fault(kind, pod=pod, local_rank=trial % 2, second_pod=other, second_local_rank=0)


def run_kind(kind: FaultKind, trials: int, root: Path) -> None:
    outcomes: dict[str, list[tuple[bool, float | None]]] = {"plugin": [], "baseline": []}
    for trial in range(trials):
        fault = fault_for(kind, trial)
        for label, task, aggregation, decide in (
            ("plugin", train_2x2, False, ours_worker),
            ("baseline", train_2x2_elastic, True, lambda r: go_rule_worker(r.output_prefix)),
        ):
            spec = JobSpec(task=task, nnodes=2, nproc_per_node=2, store=StoreAccess(str(root / "store")),
                           fault=fault, aggregation=aggregation)
            result = run_job(spec, work_dir=root / "pods")
            outcomes[label].append((decide(result) == result.injected_worker, result.fault_to_exit_s))
    cells = []
    for label in ("plugin", "baseline"):
        ok = sum(correct for correct, _ in outcomes[label])
        times = [t for _, t in outcomes[label] if t is not None]
        median = f"{statistics.median(times):.1f} s" if times else "n/a"
        cells.append(f"{ok}/{trials} ({100 * ok / trials:.0f}%), {median}")
    print(f"{kind.value:<10} {cells[0]:>28} {cells[1]:>28}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--kinds", default="raise,sigkill,sigabrt,ordering")
    args = parser.parse_args()
    logging.disable(logging.CRITICAL)
    root = Path(tempfile.mkdtemp(prefix="rootcause-e2e-"))
    print(f"{args.trials} trials per kind; 2 pods x 2 workers; correct worker and median fault->all pods exited")
    print(f"{'fault':<10} {'this plugin':>28} {'Elastic + Go rule':>28}")
    for kind in args.kinds.split(","):
        run_kind(FaultKind(kind), args.trials, root)


if __name__ == "__main__":
    main()
