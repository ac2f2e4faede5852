"""Time from the first failure to the pod's exit, with one worker ignoring SIGTERM.

Run by hand: ``.venv/bin/python -m benchmarks.teardown [--trials 1]``. Each trial runs a 2-worker
task locally (flytekit's local execution, as ``pyflyte run`` does): rank 0 ignores SIGTERM and
lingers, then rank 1 raises after noting ``time.time_ns()``. The figure is the time from that note
until the task call returns (the pod would exit right after), for

- kfpytorch ``Elastic`` (its defaults: ``monitor_interval`` 5 s; torch's function-launch teardown
  waits 30 s between SIGTERM and SIGKILL), and
- ``ElasticRootCause`` with its defaults (``monitor_interval`` 0.2 s, ``teardown_grace_s`` 5 s) and
  with ``teardown_grace_s=1``.

Expected: about monitor interval / 2 + 30 s for ``Elastic``; about 0.25 s + the grace for ours,
plus process start-up noise in both.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import statistics
import tempfile
import time
from typing import Any

from flytekit import task
from flytekitplugins.kfpytorch import Elastic

from flytekitplugins_rootcause import ElasticRootCause
from testbed.sync import wait_for

_READY = "sigterm-ignored"
_FAILED_AT = "failed-at-ns"


def _fail_while_rank0_ignores_sigterm(marker_dir: str) -> int:
    if int(os.environ["RANK"]) == 1:
        wait_for(os.path.join(marker_dir, _READY))
        with open(os.path.join(marker_dir, _FAILED_AT), "w") as handle:
            handle.write(str(time.time_ns()))
        raise RuntimeError("first failure")
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with open(os.path.join(marker_dir, _READY), "w"):
        pass
    time.sleep(300)
    return 0


@task(task_config=Elastic(nnodes=1, nproc_per_node=2))
def with_elastic(marker_dir: str) -> int:
    return _fail_while_rank0_ignores_sigterm(marker_dir)


@task(task_config=ElasticRootCause(nnodes=1, nproc_per_node=2))
def with_rootcause_default_grace(marker_dir: str) -> int:
    return _fail_while_rank0_ignores_sigterm(marker_dir)


@task(task_config=ElasticRootCause(nnodes=1, nproc_per_node=2, teardown_grace_s=1.0))
def with_rootcause_grace_1s(marker_dir: str) -> int:
    return _fail_while_rank0_ignores_sigterm(marker_dir)


TASKS: dict[str, Any] = {
    "kfpytorch Elastic (monitor 5 s, torch's 30 s)": with_elastic,
    "ElasticRootCause (monitor 0.2 s, grace 5 s)": with_rootcause_default_grace,
    "ElasticRootCause (monitor 0.2 s, grace 1 s)": with_rootcause_grace_1s,
}


def failure_to_exit_s(task_: Any) -> float:
    """Seconds from rank 1's failure to the task call returning."""
    with tempfile.TemporaryDirectory() as marker_dir:
        try:
            task_(marker_dir=marker_dir)
        except Exception:  # the task is meant to fail
            returned_ns = time.time_ns()
        else:
            raise RuntimeError("the benchmark task succeeded; it must fail")
        with open(os.path.join(marker_dir, _FAILED_AT)) as handle:
            return (returned_ns - int(handle.read())) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1)
    args = parser.parse_args()
    logging.disable(logging.CRITICAL)
    print(f"== First failure -> task returns, one worker ignoring SIGTERM ({args.trials} trial(s) each) ==")
    for name, task_ in TASKS.items():
        times = [failure_to_exit_s(task_) for _ in range(args.trials)]
        spread = f"  (min {min(times):.2f}, max {max(times):.2f})" if len(times) > 1 else ""
        print(f"{name:<48} {statistics.median(times):6.2f} s{spread}", flush=True)


if __name__ == "__main__":
    # Run the copy imported under the module's own name, whose tasks spawned workers can import.
    from benchmarks import teardown

    teardown.main()
