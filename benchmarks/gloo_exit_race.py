"""Does a process that ends right after a gloo collective abort on its way out? (torch 2.13)

Run by hand: ``.venv/bin/python -m benchmarks.gloo_exit_race [--runs 150] [--launches 100] [--load 2]``.

Why: a one-process gloo script (the seam's Flight Recorder smoke test) that leaves its group alive can
die with ``terminate called without an active exception`` after printing the right answer. A core
dump shows the cause: gloo's worker thread dropped the last reference to the finished all-reduce after the
main thread had returned from it and begun finalizing the interpreter; freeing its tensors needs the
GIL, CPython ends a thread that asks for it during finalization, and that unwind through C++ calls
``std::terminate`` (docs/upstream.md). Two questions, answered with counts:

1. ``--runs`` one-process scripts that all-reduce twice and end, with the group left alive and with
   ``destroy_process_group()`` before the end: how many abort?
2. ``--launches`` ``ElasticRootCause`` tasks (1 pod x 4 spawned gloo workers) whose function returns
   right after its last all-reduce, its group left alive: how many launches fail? A worker here
   waits until the agent has read its result before it exits (torch's elastic ``_wrap``).

``--load N`` busy processes compete for the CPU (the race needs a thread that is not scheduled).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

from benchmarks.cpu_load import busy_processes
from testbed.gloo_scripts import FLIGHT_RECORDER_EXPECTED, flight_recorder_script, recorded_position


def count_script_aborts(runs: int, destroy: bool) -> int:
    """Runs of the one-process script (the seam's Flight Recorder smoke test, with its group left
    alive or ended) that did not end with exit code 0 after printing the right answer."""
    failed = 0
    with tempfile.TemporaryDirectory() as folder:
        script = os.path.join(folder, "all_reduce_and_end.py")
        with open(script, "w") as handle:
            handle.write(flight_recorder_script(destroy=destroy))
        for _ in range(runs):
            failed += not _ended_cleanly(script)
    return failed


def _ended_cleanly(script: str) -> bool:
    done = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=300, check=False)
    if done.returncode == 0 and recorded_position(done.stdout) == FLIGHT_RECORDER_EXPECTED:
        return True
    print(f"  exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}", flush=True)
    return False


def count_failed_launches(launches: int) -> int:
    """Successful-by-design ``ElasticRootCause`` launches that raised instead of returning."""
    from benchmarks.elastic_scenarios import ALL_REDUCE_AND_RETURN

    failed = 0
    for index in range(launches):
        try:
            ALL_REDUCE_AND_RETURN(x=index)
        except Exception as exc:  # a failed launch is what is counted, whatever it raised
            failed += 1
            print(f"  launch {index} failed: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
    return failed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=150, help="one-process scripts per variant")
    parser.add_argument("--launches", type=int, default=100, help="elastic launches of 4 workers")
    parser.add_argument("--load", type=int, default=2, help="busy processes competing for the CPU")
    args = parser.parse_args()
    with busy_processes(args.load):
        for destroy in (False, True):
            started = time.monotonic()
            failed = count_script_aborts(args.runs, destroy)
            label = "destroy_process_group() at the end" if destroy else "group left alive"
            print(f"one-process gloo script, {label}: {failed} aborted in {args.runs} runs "
                  f"({time.monotonic() - started:.0f} s, load {args.load})", flush=True)
        started = time.monotonic()
        failed = count_failed_launches(args.launches)
        print(f"ElasticRootCause, 4 spawned gloo workers returning right after an all-reduce: {failed} failed "
              f"launches in {args.launches} ({4 * args.launches} worker exits; {time.monotonic() - started:.0f} s, "
              f"load {args.load})", flush=True)


if __name__ == "__main__":
    main()
