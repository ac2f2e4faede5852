"""Straggler pre-check: find slow nodes before training, with paired benchmarks in two rounds.

Two ways to use it:

* ``ElasticRootCause(..., straggler_check=StragglerCheck(...))``: every worker runs the check
  (``run_straggler_check_in_worker``) before the user's function, in the same launch;
* ``@task(task_config=StragglerPrecheck(..., check=StragglerCheck(...)))`` returning
  ``StragglerReport``: a task that runs only the check.

See ``docs/straggler.md``.
"""

from flytekitplugins_rootcause.straggler.actions import EXCLUDE_RESTART_EXIT_CODE
from flytekitplugins_rootcause.straggler.errors import (
    StragglerCheckError,
    StragglerConfigError,
    StragglerDetectedError,
)
from flytekitplugins_rootcause.straggler.report import NodeResult, StragglerReport
from flytekitplugins_rootcause.straggler.settings import Action, StragglerCheck, Workload, validate_for_task
from flytekitplugins_rootcause.straggler.task import StragglerPrecheck, StragglerPrecheckFunctionTask
from flytekitplugins_rootcause.straggler.worker import run_straggler_check_in_worker

__all__ = [
    "EXCLUDE_RESTART_EXIT_CODE",
    "Action",
    "NodeResult",
    "StragglerCheck",
    "StragglerCheckError",
    "StragglerConfigError",
    "StragglerDetectedError",
    "StragglerPrecheck",
    "StragglerPrecheckFunctionTask",
    "StragglerReport",
    "Workload",
    "run_straggler_check_in_worker",
    "validate_for_task",
]
