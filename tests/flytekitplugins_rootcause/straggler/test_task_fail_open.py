"""A straggler pre-check on a kfpytorch that lacks what it needs is skipped, never a failed task.

The pre-check hands its workers the check through kfpytorch's ``_execute`` and ``_task_function``;
a kfpytorch without them would otherwise fail the workflow the pre-check guards. The process here
runs the task with a kfpytorch whose ``PytorchElasticFunctionTask._execute`` is gone (the
harness's upstream skew, loaded at interpreter start as in a pod).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rootcause_harness.faults import upstream_skew_env

MISSING = "flytekitplugins.kfpytorch.task.PytorchElasticFunctionTask._execute"

_SCRIPT = """
import json
from flytekit import task
from flytekitplugins_rootcause.straggler import StragglerCheck, StragglerPrecheck, StragglerReport

@task(task_config=StragglerPrecheck(nnodes=2, nproc_per_node=1, check=StragglerCheck(action="fail")))
def precheck() -> StragglerReport:
    return StragglerReport()  # never run: the check is the body

report = precheck()
print(json.dumps({"skipped": report.skipped, "action": report.action, "stragglers": len(report.stragglers)}))
"""


@pytest.mark.slow
def test_a_precheck_whose_kfpytorch_lacks_an_internal_is_skipped_and_says_why(tmp_path: Path) -> None:
    env = {**os.environ, **upstream_skew_env(tmp_path / "skew", removed=(MISSING,),
                                             pythonpath=os.environ.get("PYTHONPATH", ""))}
    script = tmp_path / "precheck_job.py"  # flytekit reads a task's source: a file, not -c
    script.write_text(_SCRIPT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240, env=env,
                          cwd=tmp_path, check=False)

    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["skipped"].startswith("root-cause diagnosis is off: ") and MISSING in report["skipped"], report
    assert report == {**report, "action": "fail", "stragglers": 0}
    assert MISSING in done.stderr  # the pod log says it too
