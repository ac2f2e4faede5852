"""An ElasticRootCause task whose agent hangs, for running under the real patched entrypoint.

Importing this module in the pod (the entrypoint loads the task by module) makes
``LocalElasticAgent._monitor_workers`` block forever, test-only: the agent never notices rank 1's
failure and never returns, so only the agent watchdog can end the pod, through the entrypoint's
last-resort sink.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from flytekit import task
from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

from flytekitplugins_rootcause import ElasticRootCause
from tests.start_method import START_METHOD


def _block_forever(self: Any, worker_group: Any) -> Any:
    threading.Event().wait()


LocalElasticAgent._monitor_workers = _block_forever  # type: ignore[method-assign]


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
