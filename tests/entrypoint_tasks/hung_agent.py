"""An ElasticRootCause task whose agent hangs, for running under the real patched entrypoint.

Importing this module in the pod (the entrypoint loads the task by module) makes
``LocalElasticAgent._monitor_workers`` block forever, test-only: the agent never notices rank 1's
failure and never returns, so only the agent watchdog can end the pod, through the entrypoint's
last-resort sink.
"""

from __future__ import annotations

import os
import time

from flytekit import task

from flytekitplugins_rootcause import ElasticRootCause
from rootcause_harness.faults import hang_agent_monitor
from tests.start_method import START_METHOD

hang_agent_monitor()


@task(
    task_config=ElasticRootCause(
        start_method=START_METHOD,
        nnodes=1, nproc_per_node=2, teardown_grace_s=1.0, agent_watchdog_interval_s=0.2, agent_hang_timeout_s=5.0
    )
)
def rank_one_fails_under_a_hung_agent(x: int) -> int:
    if int(os.environ["RANK"]) == 1:
        raise ValueError(f"root cause on rank 1 (input {x})")
    time.sleep(300)
    return x
