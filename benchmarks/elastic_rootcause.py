"""Root-cause accuracy of ElasticRootCause vs kfpytorch's Elastic, and the cost of running it.

Run by hand: ``.venv/bin/python -m benchmarks.elastic_rootcause [--trials 20]``. Prints:

1. accuracy per fault scenario (b) SIGKILL, (c) SIGABRT, (d) two errors 50 ms apart in the same
   second, (e) SIGKILL 1 s before the peer's collective error: the share of trials whose reported
   rank is the injected one. Elastic's report is ``ChildFailedError.get_first_failure()``, which
   is what kfpytorch 1.16 raises; ours is the root cause of ``ElasticRootCauseError``;
2. wall time of a successful 2-worker task (median of 5) with each;
3. the agent's CPU time while workers run 10 s, for monitor intervals 5, 0.5 and 0.1 s.

Tasks run through flytekit's local execution, exactly as ``pyflyte run`` runs them.
"""

from __future__ import annotations

import argparse
import logging
import resource
import statistics
import time
from typing import Any

from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

from benchmarks import elastic_scenarios as sc
from flytekitplugins_rootcause.exceptions import RootCauseDetails


def _chain(exc: BaseException | None) -> list[Any]:
    seen: list[Any] = []
    stack: list[Any] = [exc]
    while stack:
        item = stack.pop()
        if item is None or any(item is s for s in seen):
            continue
        seen.append(item)
        if isinstance(item, BaseException):
            stack += [item.__cause__, item.__context__, getattr(item, "value", None)]
    return seen


def reported_rank(exc: BaseException) -> int | None:
    """The rank a user is shown as the failure: ours, else torch's first failure."""
    chain = _chain(exc)
    for item in chain:
        if isinstance(item, RootCauseDetails):
            return item.root_cause.global_rank
    for item in chain:
        if isinstance(item, ChildFailedError):
            return item.get_first_failure()[0]
    return None


def run_trial(task: Any, faulty_rank: int) -> tuple[int | None, float]:
    started = time.monotonic()
    try:
        task(k=faulty_rank)
    except Exception as exc:  # the task is meant to fail
        return reported_rank(exc), time.monotonic() - started
    return None, time.monotonic() - started


def accuracy(trials: int, names: set[str] | None = None) -> None:
    print(f"\n== Root cause reported correctly ({trials} trials per scenario and config) ==")
    print(f"{'scenario':<26} {'Elastic (kfpytorch)':>22} {'ElasticRootCause':>18} {'median s (E/ERC)':>18}")
    for scenario in sc.SCENARIOS:
        if names and scenario.name not in names:
            continue
        results: dict[str, list[tuple[int | None, float]]] = {"elastic": [], "ours": []}
        for _ in range(trials):
            results["elastic"].append(run_trial(sc.ELASTIC_TASKS[scenario.name], scenario.faulty_rank))
            results["ours"].append(run_trial(sc.ROOTCAUSE_TASKS[scenario.name], scenario.faulty_rank))
        cells = []
        for key in ("elastic", "ours"):
            ok = sum(rank == scenario.faulty_rank for rank, _ in results[key])
            cells.append(f"{ok}/{trials} ({100 * ok / trials:.0f}%)")
        times = "/".join(f"{statistics.median(t for _, t in results[k]):.1f}" for k in ("elastic", "ours"))
        print(f"{scenario.name:<26} {cells[0]:>22} {cells[1]:>18} {times:>18}", flush=True)


def success_overhead(repeats: int = 5) -> None:
    print(f"\n== Successful 2-worker task, wall time (median of {repeats}) ==")
    for name, task in sc.SUCCESS_TASKS.items():
        walls = []
        for _ in range(repeats):
            started = time.monotonic()
            assert task(x=1) == 1
            walls.append(time.monotonic() - started)
        print(f"{name:<34} median {statistics.median(walls):.2f} s  (min {min(walls):.2f}, max {max(walls):.2f})")


def monitor_cost(work_s: float = 10.0) -> None:
    print(f"\n== Agent CPU while 2 workers run {work_s:.0f} s, by monitor_interval ==")
    for interval, task in sc.MONITOR_TASKS.items():
        before = resource.getrusage(resource.RUSAGE_SELF)
        started = time.monotonic()
        task(seconds=work_s)
        wall = time.monotonic() - started
        after = resource.getrusage(resource.RUSAGE_SELF)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        print(
            f"monitor_interval {interval:>4} s: agent CPU {cpu:.2f} s over {wall:.1f} s wall "
            f"({100 * cpu / wall:.1f}% of a core)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--scenarios", default="", help="comma-separated scenario names (default: all)")
    parser.add_argument("--skip-accuracy", action="store_true")
    parser.add_argument("--skip-cost", action="store_true")
    args = parser.parse_args()
    logging.disable(logging.CRITICAL)
    if not args.skip_accuracy:
        accuracy(args.trials, set(filter(None, args.scenarios.split(","))))
    if not args.skip_cost:
        success_overhead()
        monitor_cost()


if __name__ == "__main__":
    main()
