"""``flyteplugins.rootcause.report``: which tabs the task's report gets (the failure timeline, soft restarts, the
diagnosis's readiness, the straggler check), what each tab holds, and that a failing report never stops the task.
Flushed by flyte's own report to a real output folder; the merging and locking are ``test_report_page``'s and
``test_report_lock``'s."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from flyteplugins.rootcause import report as report_module
from flyteplugins.rootcause.report import (
    READINESS_TAB,
    RESTARTS_TAB,
    STRAGGLER_TAB,
    TIMELINE_TAB,
    add_straggler_tab,
    publish_readiness,
    publish_restarts,
    publish_tab,
    publish_timeline,
    timeline_page,
)
from flyteplugins.rootcause.report_page import tabs_of_page
from rootcause_engine.agent.diagnosis.agreed import AgreedReport, PodWord, agreed_report
from rootcause_engine.agent.diagnosis.timeline_page import restarts_html, timeline_html
from rootcause_engine.straggler.page import render_html
from rootcause_engine.straggler.report import StragglerReport
from rootcause_engine.upstream.readiness import Readiness, RootCauseUpstreamWarning
from tests.flyteplugins.rootcause.action_context import process_of_the_action
from tests.rootcause_engine.agent.diagnosis.test_agreed import ROOT, VICTIM_0

RESTART = (1_700_000_000_000_000_000, "train-worker-1", "restarted its workers", "injected failure")
AGREED = agreed_report([PodWord("pod-0", (VICTIM_0,)), PodWord("pod-1", (ROOT,))])


def _flushed_tabs(output_path: Path) -> dict[str, str]:
    tabs = tabs_of_page((output_path / "report.html").read_text())
    assert tabs is not None
    return dict(tabs)


def test_the_timeline_tab_is_the_agreed_failures_then_the_soft_restarts() -> None:
    assert timeline_page(AGREED) == timeline_html(AGREED.failures)
    assert timeline_page(AGREED, (RESTART,)) == timeline_html(AGREED.failures) + restarts_html((RESTART,))
    bare = AgreedReport("[root cause] lost", True, None, None, None, ())
    assert timeline_page(bare) == "" and timeline_page(bare, (RESTART,)) == restarts_html((RESTART,))


def test_publishing_the_timeline_flushes_it_under_its_tab(tmp_path: Path) -> None:
    with process_of_the_action(tmp_path):
        asyncio.run(publish_timeline(AGREED, (RESTART,)))
    assert _flushed_tabs(tmp_path)[TIMELINE_TAB] == timeline_page(AGREED, (RESTART,))


@pytest.mark.parametrize(
    "publish",
    [lambda: publish_restarts(()), lambda: publish_readiness(Readiness()), lambda: publish_tab(TIMELINE_TAB, "")],
    ids=["no-restarts", "verified", "empty-tab"],
)
def test_nothing_to_say_flushes_nothing(tmp_path: Path, publish: object) -> None:
    with process_of_the_action(tmp_path):
        asyncio.run(publish())  # type: ignore[operator]
    assert not (tmp_path / "report.html").exists()


def test_a_diagnosis_that_is_off_says_why_in_its_tab(tmp_path: Path) -> None:
    readiness = Readiness(off_reason="flyte 9.9 has no flyte._internal.runtime.io.report_path")
    with process_of_the_action(tmp_path):
        asyncio.run(publish_readiness(readiness))
    tab = _flushed_tabs(tmp_path)[READINESS_TAB]
    assert tab == readiness.page and "root-cause diagnosis is off: flyte 9.9 has no" in tab


def test_the_straggler_tab_waits_for_the_process_s_next_flush(tmp_path: Path) -> None:
    report = StragglerReport(skipped="1 node(s), the check needs at least min_nodes=2", action="warn")
    with process_of_the_action(tmp_path) as own:
        add_straggler_tab(report)
        assert not (tmp_path / "report.html").exists()
        assert own.get_tab(STRAGGLER_TAB).get_html() == render_html(report)
        asyncio.run(publish_restarts((RESTART,)))
    assert list(_flushed_tabs(tmp_path)) == [STRAGGLER_TAB, RESTARTS_TAB]


def test_a_report_that_cannot_be_written_is_logged_and_the_task_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("")  # the output path lies under a file: no report.html can be written there
    with process_of_the_action(blocked / "outputs"), caplog.at_level(logging.ERROR, logger=report_module.__name__):
        asyncio.run(publish_timeline(AGREED))
    assert f"could not publish the {TIMELINE_TAB} report tab" in caplog.text


def test_an_upstream_line_is_warned_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report_module, "_warned", set())
    with pytest.warns(RootCauseUpstreamWarning, match="^flyte's template moved$"):
        report_module._warn_once("flyte's template moved")
    with pytest.warns(RootCauseUpstreamWarning, match="^another line$") as warned:
        report_module._warn_once("flyte's template moved")
        report_module._warn_once("another line")
    assert len(warned) == 1
