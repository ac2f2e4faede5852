"""``flytekitplugins_rootcause.straggler.worker``: the check in a flytekit task's worker, with rank 0's report as a
Deck and ``action='fail'`` as flytekit's user error (one real gloo worker on a loopback store; no launch)."""

from __future__ import annotations

import pickle

import pytest
import torch.distributed as dist

from flytekitplugins_rootcause.straggler.exceptions import StragglerDetectedError
from flytekitplugins_rootcause.straggler.report import DECK_NAME
from flytekitplugins_rootcause.straggler.worker import (
    FlytekitStragglerFrontEnd,
    run_straggler_check_in_worker,
    straggler_check_hook,
)
from rootcause_engine.straggler.decision import SLOW_COMPUTE
from rootcause_engine.straggler.page import render_html
from rootcause_engine.straggler.report import NodeResult, StragglerReport
from rootcause_engine.straggler.settings import StragglerCheck
from rootcause_engine.straggler.worker import StragglerCheckHook
from tests.flytekitplugins_rootcause.straggler.flytekit_decks import task_decks


def _one_worker(monkeypatch: pytest.MonkeyPatch, port: int) -> None:
    """This process is the only worker of a one-node job, whose agent hosts the store on ``port``."""
    for name, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "GROUP_RANK": "0",
                        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "TORCHELASTIC_USE_AGENT_STORE": "True",
                        "FLYTE_INTERNAL_WORKER_NAME": "train-worker-0"}.items():
        monkeypatch.setenv(name, value)


def test_a_one_node_check_is_skipped_and_rank_0_publishes_the_report_as_a_deck(
    monkeypatch: pytest.MonkeyPatch, server_port: int
) -> None:
    _one_worker(monkeypatch, server_port)
    with task_decks() as decks:
        report = run_straggler_check_in_worker(StragglerCheck(action="fail"), nnodes=1)
    assert report.skipped == "1 node(s), the check needs at least min_nodes=2"
    assert (report.action, report.backend) == ("fail", "gloo")  # skipped: nothing to fail on
    assert [(published.name, published.html) for published in decks] == [(DECK_NAME, render_html(report))]
    assert not dist.is_initialized()  # the check's own group is gone: the user's init works as before


def test_the_front_end_s_error_for_fail_is_flytekit_s_straggler_error() -> None:
    report = StragglerReport(nodes=[NodeResult(1, "train-worker-1", "h1", 1, verdict=SLOW_COMPUTE)], action="fail")
    error = FlytekitStragglerFrontEnd().detected_error(report, "all nodes were measured")
    assert isinstance(error, StragglerDetectedError) and error.report is report
    assert str(error.value).splitlines()[0] == ("Straggler check failed before training started: pod "
                                                "'train-worker-1' (node rank 1) is slow-compute (all nodes were "
                                                "measured).")


def test_the_front_end_publishes_to_the_deck() -> None:
    report = StragglerReport(skipped="no nodes")
    with task_decks() as decks:
        FlytekitStragglerFrontEnd().publish(report)
    assert [published.name for published in decks] == [DECK_NAME]


def test_the_hook_carries_the_check_the_flytekit_front_end_and_nnodes_and_travels_pickled() -> None:
    check = StragglerCheck(action="exclude", threshold=1.5)
    hook = straggler_check_hook(check, "2:4")
    assert hook == StragglerCheckHook(check, FlytekitStragglerFrontEnd(), nnodes="2:4")
    assert pickle.loads(pickle.dumps(hook)) == hook  # shipped to every worker
