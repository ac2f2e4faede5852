"""Tasks whose ``task_config`` is an ``ElasticRootCause``, with the function run in-process.

The entrypoint chooses its error files from the loaded task's config; these tasks carry the config
while running their function directly (a ``PythonFunctionTask``, no torch launch), so each entrypoint
run stays cheap. What they raise is what the agent raises after ranking its workers' failures. The
real ``ElasticRootCauseFunctionTask`` runs in ``elastic.py``.
"""

from __future__ import annotations

import os
import time

from flytekit.core.python_function_task import PythonFunctionTask

from flytekitplugins_rootcause.config import ElasticRootCause
from tests.entrypoint_tasks.raising import raise_root_cause, wait_at_barrier


def _root_cause(x: int) -> int:
    raise_root_cause(recoverable=False)
    return x


def _recoverable_root_cause(x: int) -> int:
    raise_root_cause(recoverable=True)
    return x


def _root_cause_after_barrier(x: int) -> int:
    """Fail at the moment the test releases every writer, stamped with the real time of failure."""
    wait_at_barrier()
    os.environ["ROOTCAUSE_TEST_TIMESTAMP_NS"] = str(time.time_ns())
    raise_root_cause(recoverable=False)
    return x


def _succeed(x: int) -> int:
    return x + 1


def _in_process(fn, config: ElasticRootCause) -> PythonFunctionTask:
    return PythonFunctionTask(task_config=config, task_function=fn)


#: ElasticRootCause defaults: per-worker files, and error.pb only if absent.
root_cause = _in_process(_root_cause, ElasticRootCause())
recoverable_root_cause = _in_process(_recoverable_root_cause, ElasticRootCause())
succeed = _in_process(_succeed, ElasticRootCause())
no_shared = _in_process(_root_cause, ElasticRootCause(error_pb_if_absent=False))
no_per_worker = _in_process(_root_cause, ElasticRootCause(per_worker_error_files=False))
neither = _in_process(_root_cause, ElasticRootCause(per_worker_error_files=False, error_pb_if_absent=False))
root_cause_after_barrier = _in_process(_root_cause_after_barrier, ElasticRootCause())
