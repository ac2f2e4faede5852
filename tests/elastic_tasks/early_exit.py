"""A worker that ends with exit code 0 without returning its result (``os._exit(0)``).

torch's join counts exit code 0 as a success, so without the launch observer the agent's monitor
loop reads HEALTHY while the other worker lives, and returns a "success" missing a result once it
ends. Rank 0 ignores SIGTERM and lingers, the state in which the reported stall was seen.
"""

from __future__ import annotations

import os
import signal
import time

from flytekit import task

from flytekitplugins_rootcause import ElasticRootCause
from tests.watchdog_tasks.sync import READY_FILE, touch, wait_for


@task(task_config=ElasticRootCause(nnodes=1, nproc_per_node=2, teardown_grace_s=1.0))
def rank_1_exits_0_early(marker_dir: str) -> int:
    if int(os.environ["RANK"]) == 1:
        wait_for(os.path.join(marker_dir, READY_FILE))
        os._exit(0)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    touch(os.path.join(marker_dir, READY_FILE))
    time.sleep(120)
    return 0
