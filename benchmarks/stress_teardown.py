"""Stress the failure path: does a failing launch ever stall instead of raising its root cause?

Run by hand: ``.venv/bin/python -m benchmarks.stress_teardown [--runs 200] [--load 2]``.

The case: one pod, ``ElasticRootCause(nnodes=1, teardown_grace_s=2)``; one worker
ignores SIGTERM and sleeps for minutes, another fails about a second after it started (raise,
SIGKILL or SIGABRT), any others linger normally. Variants cycle through:

- the failing rank before or after the SIGTERM-ignorer (rank 0 fails / rank 0 ignores);
- 2, 3 and 4 workers;
- the ``spawn`` and ``fork`` start methods;
- the fault: ``raise``, ``sigkill``, ``sigabrt``, and ``exit0`` (``os._exit(0)``: the worker ends
  without returning its result, which torch's own join counts as a success).

Runs call the task locally as ``pyflyte run`` does, ``--batch`` of them back to back in one child
process (launches following each other, as in the reported stall), with ``--load N`` busy processes
competing for the CPU. A run *stalls* when the task has not raised
within ``--stall-s`` seconds of the fault (the grace is 2 s; the agent watchdog's limit is
``agent_hang_timeout_s``, 60 s by default, so a run that needed the watchdog counts as a stall too).
A stalled run leaves the stacks of every thread of its agent (``faulthandler``) under
``--stacks-dir``. It also counts a run whose error does not name the failing rank.

Printed: runs, stalls, wrong root causes, and the median, p99 and max time from the fault to the
raised error, per variant group and overall.
"""

from __future__ import annotations

import argparse
import dataclasses
import faulthandler
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from flytekit import task

from benchmarks.cpu_load import busy_processes
from flytekitplugins_rootcause import ElasticRootCause

_IGNORER_READY = "ignorer-ready"
_FAULT_AT = "fault-at-ns"
GRACE_S = 2.0


@dataclasses.dataclass(frozen=True)
class Variant:
    nproc: int
    start_method: str
    fault: str  # raise | sigkill | sigabrt | exit0
    failing_rank: int
    ignoring_rank: int

    @property
    def label(self) -> str:
        order = "fail<ignore" if self.failing_rank < self.ignoring_rank else "ignore<fail"
        return f"{self.nproc}w {self.start_method:<5} {self.fault:<7} {order}"


def _wait_for(path: str, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.005)


def _worker(marker_dir: str, fault: str, failing_rank: int, ignoring_rank: int) -> int:
    rank = int(os.environ["RANK"])
    if rank == ignoring_rank:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        Path(marker_dir, _IGNORER_READY).touch()
        time.sleep(600)
        return rank
    if rank == failing_rank:
        _wait_for(os.path.join(marker_dir, _IGNORER_READY))
        time.sleep(1.0)
        Path(marker_dir, _FAULT_AT).write_text(str(time.time_ns()))
        if fault == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        if fault == "sigabrt":
            os.abort()
        if fault == "exit0":
            os._exit(0)  # ends without returning its result: torch's join counts it a success
        raise ValueError(f"stress fault on rank {rank}")
    time.sleep(600)
    return rank


def _config(nproc: int, start_method: str) -> ElasticRootCause:
    return ElasticRootCause(nnodes=1, nproc_per_node=nproc, start_method=start_method, teardown_grace_s=GRACE_S)


# One task per (workers, start method), at module level so spawned workers can import them.
@task(task_config=_config(2, "spawn"))
def stress_2_spawn(marker_dir: str, fault: str, failing_rank: int, ignoring_rank: int) -> int:
    return _worker(marker_dir, fault, failing_rank, ignoring_rank)


@task(task_config=_config(2, "fork"))
def stress_2_fork(marker_dir: str, fault: str, failing_rank: int, ignoring_rank: int) -> int:
    return _worker(marker_dir, fault, failing_rank, ignoring_rank)


@task(task_config=_config(3, "spawn"))
def stress_3_spawn(marker_dir: str, fault: str, failing_rank: int, ignoring_rank: int) -> int:
    return _worker(marker_dir, fault, failing_rank, ignoring_rank)


@task(task_config=_config(3, "fork"))
def stress_3_fork(marker_dir: str, fault: str, failing_rank: int, ignoring_rank: int) -> int:
    return _worker(marker_dir, fault, failing_rank, ignoring_rank)


@task(task_config=_config(4, "spawn"))
def stress_4_spawn(marker_dir: str, fault: str, failing_rank: int, ignoring_rank: int) -> int:
    return _worker(marker_dir, fault, failing_rank, ignoring_rank)


@task(task_config=_config(4, "fork"))
def stress_4_fork(marker_dir: str, fault: str, failing_rank: int, ignoring_rank: int) -> int:
    return _worker(marker_dir, fault, failing_rank, ignoring_rank)


TASKS: dict[tuple[int, str], Any] = {
    (2, "spawn"): stress_2_spawn,
    (2, "fork"): stress_2_fork,
    (3, "spawn"): stress_3_spawn,
    (3, "fork"): stress_3_fork,
    (4, "spawn"): stress_4_spawn,
    (4, "fork"): stress_4_fork,
}


def variants() -> list[Variant]:
    out = []
    for nproc, method, fault, fail_first in itertools.product(
        (2, 3, 4), ("spawn", "fork"), ("raise", "sigkill", "sigabrt", "exit0"), (False, True)
    ):
        failing, ignoring = (0, nproc - 1) if fail_first else (nproc - 1, 0)
        out.append(Variant(nproc, method, fault, failing, ignoring))
    return out


def run_one(variant: Variant, stall_s: float) -> dict[str, Any]:
    """Run the task once in this process; report the time from the fault to the raised error."""
    with tempfile.TemporaryDirectory() as marker_dir:
        try:
            TASKS[(variant.nproc, variant.start_method)](
                marker_dir=marker_dir,
                fault=variant.fault,
                failing_rank=variant.failing_rank,
                ignoring_rank=variant.ignoring_rank,
            )
        except Exception as exc:  # the task is meant to fail
            raised_ns = time.time_ns()
            message = str(exc)
        else:
            return {"error": "the task succeeded"}
        fault_file = Path(marker_dir, _FAULT_AT)
        if not fault_file.exists():
            return {"error": "no fault time recorded", "message": message[-1500:]}
        seconds = (raised_ns - int(fault_file.read_text())) / 1e9
        verdict = next((line for line in message.splitlines() if "[root cause]" in line), "")
        return {
            "seconds": seconds,
            "stalled": seconds > stall_s,
            "right": f"[root cause] rank {variant.failing_rank} " in verdict,
            "verdict": verdict[:300],
        }


def run_batch(batch: list[Variant], stall_s: float, stacks_path: str) -> None:
    """In a child: run several trials back to back (as launches follow each other on a machine).

    Prints one JSON line per trial. Before each trial, ``faulthandler`` is armed to write every
    thread's stack to ``stacks_path`` if the trial outlives the stall limit, so a stall leaves its
    evidence even when the parent has to kill this process.
    """
    import logging

    logging.disable(logging.CRITICAL)
    with open(stacks_path, "a") as stacks:
        for variant in batch:
            print(f"== {variant.label} ==", file=stacks, flush=True)
            faulthandler.dump_traceback_later(stall_s + 15, file=stacks)  # the fault comes 1-15 s after start
            try:
                result = run_one(variant, stall_s)
            finally:
                faulthandler.cancel_dump_traceback_later()
            print(json.dumps(result), flush=True)


def _trials(batch: list[Variant], stall_s: float, stacks: Path) -> list[dict[str, Any]]:
    """Run ``batch`` in one child process; a child that hangs past the hard limit is a stall."""
    command = [
        sys.executable, "-m", "benchmarks.stress_teardown", "--batch-json",
        json.dumps([dataclasses.asdict(v) for v in batch]), "--stall-s", str(stall_s), "--stacks-file", str(stacks),
    ]
    limit = len(batch) * (stall_s + 60) + 60
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                          start_new_session=True) as child:  # fmt: skip
        try:
            out, _ = child.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            out, _ = child.communicate()
    results = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    for missing in batch[len(results):]:
        results.append({"stalled": True, "seconds": None, "error": f"no result: child ended ({missing.label})"})
        break  # the trial after the last printed one is the one that stalled or crashed
    return results


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--load", type=int, default=0, help="busy processes competing for the CPU")
    parser.add_argument("--stall-s", type=float, default=30.0, help="fault -> raise longer than this is a stall")
    parser.add_argument("--stacks-dir", default=None)
    parser.add_argument("--batch", type=int, default=12, help="trials per child process")
    parser.add_argument("--batch-json", help=argparse.SUPPRESS)
    parser.add_argument("--stacks-file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.batch_json:
        run_batch([Variant(**v) for v in json.loads(args.batch_json)], args.stall_s, args.stacks_file)
        return
    stacks_dir = Path(args.stacks_dir or tempfile.mkdtemp(prefix="stress-teardown-"))
    stacks_dir.mkdir(parents=True, exist_ok=True)
    all_variants = variants()
    print(f"== {args.runs} runs, {len(all_variants)} variants, load {args.load}, stall > {args.stall_s:g} s; "
          f"stacks of stalled runs in {stacks_dir} ==", flush=True)
    results: list[tuple[Variant, dict[str, Any]]] = []
    planned = [all_variants[index % len(all_variants)] for index in range(args.runs)]
    with busy_processes(args.load):
        while len(results) < len(planned):
            batch = planned[len(results):len(results) + args.batch]
            stacks = stacks_dir / f"batch{len(results):04d}.stacks.txt"
            for variant, result in zip(batch, _trials(batch, args.stall_s, stacks), strict=False):
                index = len(results)
                results.append((variant, result))
                flag = "STALL" if result.get("stalled") else ("wrong" if not result.get("right", True) else "ok")
                if result.get("error"):
                    flag = "error"
                seconds = result.get("seconds")
                shown = f"{seconds:6.2f} s" if isinstance(seconds, float) else "   -   "
                detail = result.get("error", "") or (result.get("verdict", "") if flag == "wrong" else "")
                if result.get("message"):
                    detail += ": " + " | ".join(result["message"].splitlines()[:3])
                print(f"{index:4d} {variant.label:<32} {shown} {flag} {detail[:300]}", flush=True)
            if stacks.exists() and not any(r.get("stalled") for _, r in results[-len(batch):]):
                stacks.unlink()
    _print_summary(results)


def _print_summary(results: list[tuple[Variant, dict[str, Any]]]) -> None:
    groups: dict[str, list[dict[str, Any]]] = {"all": [r for _, r in results]}
    for variant, result in results:
        for key in (f"{variant.nproc} workers", variant.start_method, variant.fault,
                    "fail<ignore" if variant.failing_rank < variant.ignoring_rank else "ignore<fail"):
            groups.setdefault(key, []).append(result)
    print(f"\n{'group':<14} {'runs':>5} {'stalls':>7} {'wrong':>6} {'errors':>7} {'median':>8} {'p99':>8} {'max':>8}")
    for name, rows in groups.items():
        times = [r["seconds"] for r in rows if isinstance(r.get("seconds"), float)]
        stalls = sum(bool(r.get("stalled")) for r in rows)
        wrong = sum(1 for r in rows if "right" in r and not r["right"])
        errors = sum(1 for r in rows if r.get("error"))
        cells = (f"{statistics.median(times):7.2f}s {_pct(times, 0.99):7.2f}s {max(times):7.2f}s" if times
                 else f"{'-':>8} {'-':>8} {'-':>8}")
        print(f"{name:<14} {len(rows):>5} {stalls:>7} {wrong:>6} {errors:>7} {cells}")


if __name__ == "__main__":
    # Run the copy imported under the module's own name, whose tasks spawned workers can import.
    from benchmarks import stress_teardown

    stress_teardown.main()
