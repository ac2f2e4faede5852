"""A failure under the ``fork`` start method, beside a worker that ignores SIGTERM.

Two ways this plugin once lost the root cause here: a worker forked while the death watcher's
thread sat in ``poll`` crashed in its garbage collector (SIGSEGV instead of the user's exception),
and a SIGTERM sent to the failing worker while it unwound ran the handler it inherited from the
agent in the middle of torch's traceback pickle (the launch ended with "Ran out of input").
"""

from __future__ import annotations

import os
import signal
import time

from flytekit import task

from flytekitplugins_rootcause import ElasticRootCause
from testbed.sync import READY_FILE, touch, wait_for


@task(task_config=ElasticRootCause(nnodes=1, nproc_per_node=2, start_method="fork", teardown_grace_s=1.0))
def rank_1_raises_under_fork(marker_dir: str) -> int:
    if int(os.environ["RANK"]) == 1:
        wait_for(os.path.join(marker_dir, READY_FILE))
        time.sleep(1.0)  # as in the stress benchmark, where the crash showed
        raise ValueError("rank 1 failed under fork")
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    touch(os.path.join(marker_dir, READY_FILE))
    time.sleep(120)
    return 0


def _main(launches: int) -> None:
    """``python -m tests.elastic_tasks.fork_start N``: N launches back to back in one fresh process
    (as a script runs them, where the crash showed), one line per launch: exit code, signal, type."""
    import json
    import logging
    import tempfile

    from tests.elastic_tasks import fork_start
    from tests.elastic_tasks.errors import find_root_cause_error

    logging.disable(logging.CRITICAL)
    for _ in range(launches):
        with tempfile.TemporaryDirectory() as marker_dir:
            try:
                fork_start.rank_1_raises_under_fork(marker_dir=marker_dir)
                print(json.dumps({"error": "the task succeeded"}), flush=True)
            except Exception as exc:  # the task is meant to fail
                error = find_root_cause_error(exc)
                if error is None:
                    print(json.dumps({"error": f"no root-cause error: {str(exc)[-300:]}"}), flush=True)
                    continue
                root = error.root_cause
                print(json.dumps({"rank": root.global_rank, "role": root.role.value, "exitcode": root.exitcode,
                                  "signal": root.signal_name, "type": root.exception_type}), flush=True)


if __name__ == "__main__":
    import sys

    _main(int(sys.argv[1]))
