"""A Flyte 2 ``ElasticRootCause`` task whose agent hangs, for running under the real ``a0`` entrypoint.

Importing this module in a pod (``a0`` loads the task by module; a pod has a worker name) makes
``LocalElasticAgent._monitor_workers`` block forever, test-only: the agent never notices rank 1's
failure and never returns, so only the agent watchdog can end the pod, and only its failure sink
(``flyteplugins.rootcause.upstream.upload_error_document``) can write ``error.pb``. The test process,
which imports the module to serialize the task, is left as it is.
"""

from __future__ import annotations

import os
import time

import flyte

from flyteplugins.rootcause import ElasticRootCause
from rootcause_harness.faults import hang_agent_monitor

if os.environ.get("FLYTE_INTERNAL_WORKER_NAME"):
    hang_agent_monitor()

hung = flyte.TaskEnvironment(
    name="hung_agent",
    plugin_config=ElasticRootCause(
        nnodes=1, nproc_per_node=2, teardown_grace_s=1.0, agent_watchdog_interval_s=0.2, agent_hang_timeout_s=5.0
    ),
)


@hung.task
def rank_one_fails_under_a_hung_agent(x: int = 7) -> int:
    if int(os.environ["RANK"]) == 1:
        raise ValueError(f"root cause on rank 1 (input {x})")
    time.sleep(300)
    return x
