"""Workers whose way of failing used to leave the agent waiting (issue #11).

- ``rank_1_exits_0_early``: rank 1 ends with exit code 0 without returning its result
  (``os._exit(0)``). torch's join counts exit code 0 as a success, so without the launch observer
  the agent's monitor loop reads HEALTHY while the other worker lives, and returns a "success"
  missing a result once it ends.
- ``rank_1_raises_but_never_exits``: rank 1 raises, but a non-daemon thread keeps its interpreter
  from ever finishing its shutdown (a stuck data-loader thread, say). The recorded error file is
  the failure: the agent must not wait for the process to exit.

Rank 0 ignores SIGTERM and lingers in both, the state in which the reported stall was seen.
"""

from __future__ import annotations

import os
import signal
import threading
import time

from flytekit import task

from flytekitplugins_rootcause import ElasticRootCause
from testbed.sync import READY_FILE, touch, wait_for
from tests.start_method import START_METHOD


def _linger_ignoring_sigterm(marker_dir: str) -> int:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    touch(os.path.join(marker_dir, READY_FILE))
    time.sleep(120)
    return 0


@task(task_config=ElasticRootCause(start_method=START_METHOD, nnodes=1, nproc_per_node=2, teardown_grace_s=1.0))
def rank_1_exits_0_early(marker_dir: str, delay_s: float = 0.0) -> int:
    if int(os.environ["RANK"]) == 1:
        wait_for(os.path.join(marker_dir, READY_FILE))
        time.sleep(delay_s)  # long enough for the agent to poll a running launch first
        os._exit(0)
    return _linger_ignoring_sigterm(marker_dir)


@task(task_config=ElasticRootCause(start_method=START_METHOD, nnodes=1, nproc_per_node=2, teardown_grace_s=1.0))
def rank_1_raises_but_never_exits(marker_dir: str) -> int:
    if int(os.environ["RANK"]) == 1:
        wait_for(os.path.join(marker_dir, READY_FILE))
        threading.Thread(target=time.sleep, args=(600,), daemon=False).start()
        raise ValueError("rank 1 failed; its interpreter cannot finish")
    return _linger_ignoring_sigterm(marker_dir)
