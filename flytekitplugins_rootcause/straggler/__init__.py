"""Straggler pre-check: find slow nodes before training, with paired benchmarks in two rounds.

Two ways to use it:

* ``ElasticRootCause(..., straggler_check=StragglerCheck(...))``: every worker runs the check
  (``run_straggler_check_in_worker``) before the user's function, in the same launch;
* ``@task(task_config=StragglerPrecheck(..., check=StragglerCheck(...)))`` returning
  ``StragglerReport``: a task that runs only the check.

The check itself (measurements, verdicts, actions, the report's page) is the engine's,
``rootcause_engine.straggler``, which Flyte 2's flavour offers too; this package adds flytekit's
Deck, errors and the precheck task type. See ``docs/straggler.md``.
"""

from __future__ import annotations

import importlib
from typing import Any

#: Where each public name lives. Loaded on first use (PEP 562), so that a process that only measures
#: (a simulated node, a worker of the benchmark) does not import flytekit for the task classes.
_LOCATIONS = {
    "EXCLUDE_RESTART_EXIT_CODE": "rootcause_engine.straggler.actions",
    "Action": "rootcause_engine.straggler.settings",
    "NodeResult": "rootcause_engine.straggler.report",
    "StragglerCheck": "rootcause_engine.straggler.settings",
    "StragglerCheckError": "rootcause_engine.straggler.settings",
    "StragglerConfigError": "rootcause_engine.straggler.settings",
    "StragglerDetectedError": f"{__name__}.exceptions",
    "StragglerPrecheck": f"{__name__}.task",
    "StragglerPrecheckFunctionTask": f"{__name__}.task",
    "StragglerReport": "rootcause_engine.straggler.report",
    "Workload": "rootcause_engine.straggler.settings",
    "run_straggler_check_in_worker": f"{__name__}.worker",
    "validate_for_task": "rootcause_engine.straggler.settings",
}


def __getattr__(name: str) -> Any:
    module = _LOCATIONS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


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
