"""``run_straggler_check_in_worker``: the one call a worker makes before the user's function."""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import sys
import time

from flytekitplugins_rootcause.straggler.actions import EXCLUDE_RESTART_EXIT_CODE, Plan, Step, plan_action
from flytekitplugins_rootcause.straggler.check import run_check
from flytekitplugins_rootcause.straggler.deck import publish_deck
from flytekitplugins_rootcause.straggler.measure import TrialRunner, run_trial
from flytekitplugins_rootcause.straggler.report import StragglerReport
from flytekitplugins_rootcause.straggler.settings import StragglerCheck

logger = logging.getLogger("flytekitplugins_rootcause.straggler")

#: How long an excluded worker waits for its agent's SIGTERM teardown before exiting on its own.
LEAVE_GRACE_S = 60.0


def _ensure_log_handler() -> None:
    """Make the report visible in the pod log: worker processes often have no logging set up, or
    only a root logger at WARNING (a record propagates to the root's handlers whatever the root's
    own level, so our logger's INFO level is what decides)."""
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s: %(message)s"))
        logger.addHandler(handler)


def run_straggler_check_in_worker(
    check: StragglerCheck, *, nnodes: int | str | None = None, runner: TrialRunner = run_trial
) -> StragglerReport:
    """Run the check in this torch elastic worker, report it, and act on it (all workers call this).

    Inits a process group if none exists and destroys it afterwards, so the user's own
    ``init_process_group`` works as before. Rank 0 logs the table and adds the Deck. Then:
    ``warn`` returns; ``fail`` raises ``StragglerDetectedError`` on every worker (before training);
    ``exclude`` makes flagged pods leave and healthy ones restart (see ``actions.py``); this
    function then does not return. ``nnodes`` is the task's setting (default: ``PET_NNODES``),
    needed by ``exclude`` only. ``runner`` runs each compute trial (a harness such as ``simulate.py``
    wraps it to make a simulated node's device slower; the default runs the trial as it is).
    """
    _ensure_log_handler()
    report = run_check(check, runner)
    rank = int(os.environ["RANK"])
    node_rank = int(os.environ["GROUP_RANK"])
    if rank == 0:
        level = logging.WARNING if report.flagged else logging.INFO
        logger.log(level, "%s", report.table())
        publish_deck(report)
    plan = plan_action(
        report,
        check,
        node_rank=node_rank,
        nnodes=nnodes if nnodes is not None else os.environ.get("PET_NNODES"),
        restart_count=int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
        max_restarts=int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0")),
    )
    _carry_out(plan, report)
    return report


def _carry_out(plan: Plan, report: StragglerReport) -> None:
    if plan.step is Step.CONTINUE:
        if report.flagged:
            note = f", {plan.reason}" if plan.reason else ""
            logger.warning("%s; training goes on (action=%s%s)", report.summary(), report.action, note)
        return
    if plan.step is Step.FAIL:
        from flytekitplugins_rootcause.straggler.errors import StragglerDetectedError  # flytekit: only to raise

        raise StragglerDetectedError(report, plan.reason)
    if plan.step is Step.RESTART:
        logger.warning("%s; %s (exit code %d)", report.summary(), plan.reason, EXCLUDE_RESTART_EXIT_CODE)
        sys.exit(EXCLUDE_RESTART_EXIT_CODE)
    logger.warning("%s; %s", report.summary(), plan.reason)
    if int(os.environ.get("LOCAL_RANK", "0")) == 0:
        os.kill(os.getppid(), signal.SIGTERM)
    time.sleep(LEAVE_GRACE_S)
    sys.exit(EXCLUDE_RESTART_EXIT_CODE)


@dataclasses.dataclass(frozen=True)
class StragglerCheckHook:
    """The check as a worker hook of ``ElasticRootCause(straggler_check=...)``: picklable, run in every
    worker inside flytekit's execution context right before the user's function."""

    check: StragglerCheck
    nnodes: int | str | None = None

    def __call__(self) -> None:
        run_straggler_check_in_worker(self.check, nnodes=self.nnodes)
