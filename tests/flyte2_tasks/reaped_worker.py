"""A Flyte 2 ``ElasticRootCause`` task whose pod reaps its exited workers before torch reads them,
for running under the real ``a0`` entrypoint.

Importing this module in a pod (``a0`` loads the task by module; a pod has a worker name) applies
:func:`rootcause_harness.faults.reap_exited_workers_first`: torch's agent then fails with a
``TypeError`` while it builds its report of the failed worker, in place of its ``ChildFailedError``.
The test process, which imports the module to serialize the task, is left as it is.
"""

from __future__ import annotations

import os
import time

import flyte

from flyteplugins.rootcause import ElasticRootCause
from rootcause_harness.faults import reap_exited_workers_first

if os.environ.get("FLYTE_INTERNAL_WORKER_NAME"):
    reap_exited_workers_first()

reaped = flyte.TaskEnvironment(
    name="reaped_worker",
    plugin_config=ElasticRootCause(nnodes=1, nproc_per_node=2, max_restarts=0, teardown_grace_s=1.0),
)


@reaped.task
def rank_one_fails_and_is_reaped_elsewhere(x: int = 7) -> int:
    if int(os.environ["RANK"]) == 1:
        raise ValueError(f"bad batch on rank 1 (input {x})")
    time.sleep(300)
    return x
