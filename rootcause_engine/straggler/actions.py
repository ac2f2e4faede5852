"""What a worker does with the verdicts: the plan is pure, carrying it out is ``worker.py``'s job. A
job should drop its slow nodes once, before training, and never shrink below what the user sized.
So ``exclude`` acts on the first attempt only: flagged nodes leave, and the healthy ones restart
into a new round without them. When leaving would break the job, the check fails instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from rootcause_engine.straggler.report import StragglerReport
from rootcause_engine.straggler.settings import Action, StragglerCheck, StragglerConfigError, parse_nnodes

#: Exit code of a healthy worker that restarts so the job re-forms without the stragglers
#: (BSD ``EX_TEMPFAIL``: "try again"). Not a failure of the user's code: do not report it as one.
EXCLUDE_RESTART_EXIT_CODE = 75


class Step(StrEnum):
    CONTINUE = "continue"  # go on to the user's function
    FAIL = "fail"  # raise StragglerDetectedError
    LEAVE = "leave"  # this node is excluded: stop this pod's agent
    RESTART = "restart"  # this node stays: exit so the agent re-rendezvouses without the stragglers


@dataclass(frozen=True)
class Plan:
    step: Step
    reason: str = ""


def plan_action(
    report: StragglerReport,
    check: StragglerCheck,
    *,
    node_rank: int,
    nnodes: int | str | None,
    restart_count: int,
    max_restarts: int,
) -> Plan:
    """Decide this worker's step; every worker gets the same answer for the same node."""
    if report.skipped or not report.flagged or check.action is Action.WARN:
        return Plan(Step.CONTINUE)
    if check.action is Action.FAIL:
        return Plan(Step.FAIL)
    if nnodes is None:
        raise StragglerConfigError(
            "StragglerCheck(action='exclude') needs the task's nnodes range; it was neither passed nor set "
            "in PET_NNODES."
        )
    min_nodes, max_nodes = parse_nnodes(nnodes)
    if min_nodes == max_nodes:
        raise StragglerConfigError(
            f"StragglerCheck(action='exclude') needs nnodes as a range 'min:max'; nnodes={nnodes!r} is fixed."
        )
    if restart_count > 0:
        return Plan(Step.CONTINUE, f"attempt {restart_count + 1}: nodes are excluded on the first attempt only")
    if max_restarts < 1:
        raise StragglerConfigError(
            "StragglerCheck(action='exclude') re-forms the job through one restart; set max_restarts >= 1."
        )
    hosts = [n for n in report.flagged if n.hosts_rendezvous is not False]
    if hosts:
        unknown = any(n.hosts_rendezvous is None for n in hosts)
        return Plan(
            Step.FAIL,
            "cannot tell which pod hosts the rendezvous store (PET_RDZV_ENDPOINT is not set), so none is excluded"
            if unknown
            else f"{hosts[0].describe()} hosts the job's rendezvous store (PET_RDZV_ENDPOINT); if it left, no pod "
            "could re-rendezvous",
        )
    remaining = len(report.nodes) - len(report.flagged)
    if remaining < min_nodes:
        return Plan(
            Step.FAIL,
            f"excluding {len(report.flagged)} node(s) would leave {remaining}, fewer than the minimum {min_nodes}",
        )
    if any(n.node_rank == node_rank for n in report.flagged):
        return Plan(Step.LEAVE, "this node was flagged; its agent stops so the others train without it")
    return Plan(Step.RESTART, f"re-forming the job with the {remaining} healthy node(s)")
