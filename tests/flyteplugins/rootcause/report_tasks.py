"""A Flyte 2 ``ElasticRootCause`` task whose rank 0 worker flushes a report tab of the user's own, for
the real ``a0`` entrypoint (a pod loads its task by module and name).

Rank 0 logs the tab and flushes it before the training's first collective, so the page is written
before any fault the job injects at a later step (``rootcause_harness.faults.Fault``, step 3 by
default) can fail the job.
"""

from __future__ import annotations

import os

import flyte
import flyte.report

from flyteplugins.rootcause import ElasticRootCause
from rootcause_harness.training_loop import run_training

#: The user's tab, and what rank 0 logs to it.
USER_TAB = "Loss curve"
USER_HTML = '<p id="user-tab">loss went down: 0.9 &gt; 0.5</p>'

two_pods = flyte.TaskEnvironment(
    name="user_report_2x1", plugin_config=ElasticRootCause(nnodes=2, nproc_per_node=1, max_restarts=0)
)


@two_pods.task(report=True)
def train_with_a_user_tab(steps: int = 8) -> float:
    if int(os.environ["RANK"]) == 0:
        flyte.report.get_tab(USER_TAB).log(USER_HTML)
        flyte.report.flush()
    return run_training(steps)
