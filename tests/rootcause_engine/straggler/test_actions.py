"""The plan each worker makes of the verdicts (``rootcause_engine/straggler/actions.py``): continue, fail, leave
or restart, and the reasons and configuration errors that come with it."""

from __future__ import annotations

import pytest

from rootcause_engine.straggler.actions import EXCLUDE_RESTART_EXIT_CODE, Plan, Step, plan_action
from rootcause_engine.straggler.report import StragglerReport
from rootcause_engine.straggler.settings import StragglerCheck, StragglerConfigError
from tests.rootcause_engine.straggler.made_reports import report

WARN, FAIL, EXCLUDE = StragglerCheck(action="warn"), StragglerCheck(action="fail"), StragglerCheck(action="exclude")




def full_plan(rep: StragglerReport, check: StragglerCheck, node_rank: int = 0, **kw: object) -> Plan:
    args = {"nnodes": "3:4", "restart_count": 0, "max_restarts": 1, **kw}
    return plan_action(rep, check, node_rank=node_rank, **args)  # type: ignore[arg-type]


def plan(rep: StragglerReport, check: StragglerCheck, node_rank: int = 0, **kw: object) -> Step:
    return full_plan(rep, check, node_rank, **kw).step


def test_action_plan_is_the_same_for_every_worker_of_a_node() -> None:
    slow = report("ok", "ok", "slow-compute", "ok")
    assert plan(slow, StragglerCheck(action="warn")) is Step.CONTINUE
    assert plan(slow, StragglerCheck(action="fail")) is Step.FAIL
    exclude = StragglerCheck(action="exclude")
    assert plan(slow, exclude, node_rank=2) is Step.LEAVE
    assert plan(slow, exclude, node_rank=0) is Step.RESTART
    assert plan(report("ok", "ok", "ok", "ok"), exclude) is Step.CONTINUE
    # later attempts only warn, so a job never shrinks step by step
    assert plan(slow, exclude, node_rank=2, restart_count=1) is Step.CONTINUE
    # excluding below the minimum fails instead
    assert plan(report("ok", "failed", "slow-compute", "ok"), exclude, nnodes="3:4") is Step.FAIL
    with pytest.raises(StragglerConfigError, match="nnodes=4 is fixed"):
        plan(slow, exclude, nnodes=4)
    # the pod that runs the rendezvous store never leaves: the others could not re-rendezvous
    slow.nodes[2].hosts_rendezvous = True
    assert plan(slow, exclude, node_rank=0) is Step.FAIL
    slow.nodes[2].hosts_rendezvous = None  # unknown (PET_RDZV_ENDPOINT not set): fail safe
    assert plan(slow, exclude, node_rank=0) is Step.FAIL
    with pytest.raises(StragglerConfigError, match="neither passed nor set in PET_NNODES"):
        plan(slow, exclude, nnodes=None)


def test_the_healthy_node_s_restart_exit_code_is_bsd_s_try_again() -> None:
    assert EXCLUDE_RESTART_EXIT_CODE == 75


@pytest.mark.parametrize("check", [WARN, FAIL, EXCLUDE], ids=lambda c: c.action.value)
def test_a_skipped_or_clean_check_continues_whatever_the_action(check: StragglerCheck) -> None:
    skipped = StragglerReport(skipped="1 node(s), the check needs at least min_nodes=2")
    assert full_plan(skipped, check) == Plan(Step.CONTINUE)
    assert full_plan(report("ok", "ok", "ok"), check) == Plan(Step.CONTINUE)
    # nothing about the task's settings is asked when there is nothing to act on
    assert full_plan(report("ok", "ok"), check, nnodes=None, max_restarts=0) == Plan(Step.CONTINUE)


def test_a_failed_node_is_acted_on_like_a_slow_one() -> None:
    crashed = report("ok", "failed", "ok", "ok")
    assert plan(crashed, FAIL) is Step.FAIL
    assert plan(crashed, EXCLUDE, node_rank=1) is Step.LEAVE
    assert plan(crashed, EXCLUDE, node_rank=0) is Step.RESTART


def test_warn_continues_without_a_reason_even_when_nodes_are_flagged() -> None:
    assert full_plan(report("slow-network", "ok", "ok"), WARN) == Plan(Step.CONTINUE, "")


def test_exclude_without_a_restart_to_spend_is_a_configuration_error() -> None:
    with pytest.raises(StragglerConfigError, match="set max_restarts >= 1"):
        full_plan(report("ok", "slow-compute", "ok", "ok"), EXCLUDE, max_restarts=0)
    # a later attempt (the restart was spent) is no error: it only warns
    later = full_plan(report("ok", "slow-compute", "ok", "ok"), EXCLUDE, max_restarts=0, restart_count=1)
    assert later == Plan(Step.CONTINUE, "attempt 2: nodes are excluded on the first attempt only")


def test_exclude_needs_a_node_range_even_when_given_as_a_string() -> None:
    with pytest.raises(StragglerConfigError, match=r"nnodes='4:4' is fixed"):
        full_plan(report("ok", "slow-compute", "ok", "ok"), EXCLUDE, nnodes="4:4")
    with pytest.raises(StragglerConfigError, match="nnodes must be an integer or a range"):
        full_plan(report("ok", "slow-compute", "ok", "ok"), EXCLUDE, nnodes="four")


def test_each_exclude_plan_says_why() -> None:
    slow = report("ok", "ok", "slow-compute", "ok")
    assert full_plan(slow, EXCLUDE, node_rank=2).reason == (
        "this node was flagged; its agent stops so the others train without it"
    )
    assert full_plan(slow, EXCLUDE, node_rank=3).reason == "re-forming the job with the 3 healthy node(s)"
    too_few = full_plan(report("slow-compute", "failed", "ok", "ok"), EXCLUDE, nnodes="3:4")
    assert too_few == Plan(Step.FAIL, "excluding 2 node(s) would leave 2, fewer than the minimum 3")
    slow.nodes[2].hosts_rendezvous = True
    hosts = full_plan(slow, EXCLUDE)
    assert hosts.step is Step.FAIL
    assert hosts.reason.startswith("pod 'pod-2' (node rank 2) hosts the job's rendezvous store (PET_RDZV_ENDPOINT)")
    slow.nodes[2].hosts_rendezvous = None
    assert "cannot tell which pod hosts the rendezvous store" in full_plan(slow, EXCLUDE).reason


def test_a_range_that_keeps_enough_nodes_lets_several_leave() -> None:
    rep = report("slow-compute", "ok", "slow-network", "ok", "ok")
    assert [plan(rep, EXCLUDE, node_rank=n, nnodes="2:5") for n in range(5)] == [
        Step.LEAVE,
        Step.RESTART,
        Step.LEAVE,
        Step.RESTART,
        Step.RESTART,
    ]
