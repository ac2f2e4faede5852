"""``StragglerPrecheck``: a task type that runs only the straggler check and returns its report.

    @task(task_config=StragglerPrecheck(nnodes=4, nproc_per_node=8, check=StragglerCheck(action="fail")))
    def precheck() -> StragglerReport: ...

The task launches exactly like a kfpytorch ``Elastic`` task (same PyTorchJob, same rendezvous),
so it runs on the very nodes the scheduler gives an elastic job of that shape. The function's
**body is never run**: the task's result is the check's report (rank 0's), and the function only
declares the task's name, inputs and its ``-> StragglerReport`` output. Running a body after the
check would make it a training task, and that is what ``ElasticRootCause(straggler_check=...)``
is for. The Deck is on by default, since it is half of what this task is for.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from flytekit.extend import TaskPlugins
from flytekitplugins.kfpytorch.task import Elastic, PytorchElasticFunctionTask

from flytekitplugins_rootcause.config import DEFAULT_MONITOR_INTERVAL_S
from flytekitplugins_rootcause.upstream import precheck_readiness
from flytekitplugins_rootcause.upstream.flytekit_entrypoint import RunsPatchedEntrypoint
from flytekitplugins_rootcause.upstream.kfpytorch import task_function_swapped
from rootcause_engine.straggler.report import StragglerReport
from rootcause_engine.straggler.settings import Action, StragglerCheck, StragglerConfigError, parse_nnodes
from rootcause_engine.upstream.readiness import PatchesNotApplied, enter_all


@dataclass
class StragglerPrecheck(Elastic):
    """``Elastic`` plus the check to run. ``action='exclude'`` is refused: there is no training to
    go on with; use ``'fail'`` to stop a workflow on stragglers, or ``'warn'`` to only report them.
    """

    check: StragglerCheck = field(default_factory=StragglerCheck)
    #: As ``ElasticRootCause``'s: with kfpytorch's 5 s, the agent noticed its workers were done (the
    #: check takes seconds) up to 5 s late, on every run of the task.
    monitor_interval: float = DEFAULT_MONITOR_INTERVAL_S  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if not isinstance(self.check, StragglerCheck):
            raise StragglerConfigError(f"StragglerPrecheck(check=...) takes a StragglerCheck, got {self.check!r}")
        if self.check.action is Action.EXCLUDE:
            raise StragglerConfigError(
                "StragglerPrecheck runs only the check, so action='exclude' has no job to shrink; use "
                "action='fail' or 'warn' here, or ElasticRootCause(nnodes='min:max', "
                "straggler_check=StragglerCheck(action='exclude')) on the training task."
            )
        parse_nnodes(self.nnodes)


def run_precheck(check: StragglerCheck, nnodes: int | str, **_task_inputs: Any) -> StragglerReport:
    """What every worker of a ``StragglerPrecheck`` task runs instead of the function body."""
    from flytekitplugins_rootcause.straggler.worker import run_straggler_check_in_worker

    return run_straggler_check_in_worker(check, nnodes=nnodes)


class StragglerPrecheckFunctionTask(RunsPatchedEntrypoint, PytorchElasticFunctionTask):
    """kfpytorch's elastic task whose workers run the straggler check and return its report.

    Its pods run the patched entrypoint too: a check that fails (``action='fail'``, or a node that
    dies during the check) is a distributed failure like any other, one error document per pod.
    """

    task_config: StragglerPrecheck

    def __init__(self, task_config: StragglerPrecheck, task_function: Callable, **kwargs: Any) -> None:
        if kwargs.get("enable_deck") is None and kwargs.get("disable_deck") is None:
            kwargs["enable_deck"] = True
        super().__init__(task_config, task_function, **kwargs)
        outputs = self.python_interface.outputs
        if list(outputs.values()) != [StragglerReport]:
            raise StragglerConfigError(
                f"a StragglerPrecheck task returns the check's report: declare "
                f"'def {task_function.__name__}(...) -> StragglerReport', not outputs {dict(outputs)}"
            )

    def _execute(self, **kwargs: Any) -> Any:
        """Run kfpytorch's launch with the check as the workers' function (the body is not run).

        kfpytorch ships ``self._task_function`` to the workers; it is swapped for the check only for
        the launch and restored after (:func:`~flytekitplugins_rootcause.upstream.kfpytorch.task_function_swapped`),
        so the task object (name, interface, resolver) is untouched. Where kfpytorch lacks what the
        swap needs, or the swap raises, the check is skipped and the report says why: a pre-check
        must not fail the workflow it guards.
        """
        check = functools.partial(run_precheck, self.task_config.check, self.task_config.nnodes)
        readiness = precheck_readiness()
        reason = readiness.off_reason
        if reason is None:
            try:
                with contextlib.ExitStack() as stack:
                    enter_all(stack, [task_function_swapped(self, check)])
                    readiness.announce()
                    return super()._execute(**kwargs)
            except PatchesNotApplied as failed:
                reason = failed.reason
        skipped = readiness.turned_off(reason)
        skipped.announce()
        return StragglerReport(skipped=skipped.note, action=Action(self.task_config.check.action).value)


TaskPlugins.register_pythontask_plugin(StragglerPrecheck, StragglerPrecheckFunctionTask)
