"""The action's one ``report.html`` keeps the tabs rank 0's workers flushed when the ``a0`` process
flushes the failure timeline or the soft restarts (``flyteplugins.rootcause.report``): read back
from flyte's own page, merged, in-process and in a real 2-pod job."""

from __future__ import annotations

import asyncio
from pathlib import Path

import flyte.report
import pytest

from flyteplugins.rootcause import report as report_module
from flyteplugins.rootcause.report import (
    RESTARTS_TAB,
    STRAGGLER_TAB,
    TIMELINE_TAB,
    publish_restarts,
    put_flushed_tabs_first,
)
from flyteplugins.rootcause.report_page import tabs_of_page
from flyteplugins.rootcause.upstream import REPORT_TEMPLATE_IDS, report_template_problem
from rootcause_engine.upstream.readiness import RootCauseUpstreamWarning
from rootcause_harness.faults import Fault, FaultKind
from rootcause_harness.flyte2.job import JobSpec, run_job
from tests.flyteplugins.rootcause import report_tasks
from tests.flyteplugins.rootcause.action_context import process_of_the_action

#: Tabs as a user may log them: escaped names, nested and self-closed divs, a script that writes
#: ``</div>``, an empty tab, the main tab.
USER_TABS = [
    ("main", "<p>logged with flyte.report.log</p>"),
    ("Loss & <curve>", '<div class="a"><div>1</div></div>\n<script>const s = "</div>";</script>'),
    ("Odd", "<div/>text</div><table><tr><td>1</td></tr></table>"),
    ("Empty", ""),
]
#: One soft-restart row: (time ns, node, what happened, reason).
RESTART = (1_700_000_000_000_000_000, "train-worker-1", "restarted its workers", "injected failure")


def _page(tabs: list[tuple[str, str]]) -> str:
    """The page Flyte 2 renders for a report with ``tabs``."""
    report = flyte.report.Report("a0")
    for name, html in tabs:
        tab = report.get_tab(name)
        if html:
            tab.log(html)
    page = report.get_final_report()
    assert isinstance(page, str)
    return page


def test_a_page_flyte_rendered_reads_back_as_its_tabs_byte_for_byte() -> None:
    page = _page(USER_TABS)
    tabs = tabs_of_page(page)
    assert tabs == USER_TABS
    assert _page(tabs) == page
    assert tabs_of_page(_page([])) == []  # a page without tabs: nothing to keep


@pytest.mark.parametrize("cut", ["", "Odd", "const s"], ids=["empty", "torn in the tab bar", "torn in a tab"])
def test_a_torn_page_or_another_layout_reads_as_none(cut: str) -> None:
    page = _page(USER_TABS)
    assert tabs_of_page(page[:page.index(cut)] if cut else "") is None
    assert tabs_of_page("<html><body><p>another layout</p></body></html>") is None


def test_the_flushed_tabs_come_first_and_a_tab_of_this_process_s_name_takes_its_content() -> None:
    report = flyte.report.Report("a0")
    report.get_tab(STRAGGLER_TAB).log("<p>this pod's straggler table</p>")
    report.get_tab(TIMELINE_TAB).log("<p>this failure</p>")
    flushed = [*USER_TABS, (TIMELINE_TAB, "<p>a stale failure</p>"), (STRAGGLER_TAB, "<p>rank 0's</p>")]
    put_flushed_tabs_first(report, flushed)
    assert tabs_of_page(report.get_final_report()) == [
        *USER_TABS, (TIMELINE_TAB, "<p>this failure</p>"), (STRAGGLER_TAB, "<p>this pod's straggler table</p>"),
    ]


def test_a0_s_flush_keeps_what_a_worker_flushed_and_a_second_pod_s_adds_nothing_twice(tmp_path: Path) -> None:
    """A worker and two pods' ``a0`` processes, each with its own report, one output prefix."""
    with process_of_the_action(tmp_path) as worker:
        for name, html in USER_TABS:
            worker.get_tab(name).log(html)
        flyte.report.flush()
    for _pod in range(2):
        with process_of_the_action(tmp_path):
            asyncio.run(publish_restarts((RESTART,)))
    tabs = tabs_of_page((tmp_path / "report.html").read_text())
    assert tabs is not None
    assert [name for name, _ in tabs] == [*(name for name, _ in USER_TABS), RESTARTS_TAB]
    assert tabs[:-1] == [(name, html) for name, html in USER_TABS]
    assert "train-worker-1" in tabs[-1][1] and "injected failure" in tabs[-1][1]


def test_a_page_that_cannot_be_merged_is_replaced_as_before(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "report.html").write_text("<html>not Flyte's report</html>")
    with process_of_the_action(tmp_path):
        asyncio.run(publish_restarts((RESTART,)))
    tabs = tabs_of_page((tmp_path / "report.html").read_text())
    assert tabs is not None and [name for name, _ in tabs] == [RESTARTS_TAB]
    assert "is not a page of Flyte 2's report" in caplog.text


def test_the_installed_flyte_s_report_template_has_every_id_the_page_is_read_back_by() -> None:
    """The compat lane runs this in every flyte version's virtualenv: the private template still has them."""
    template = flyte.report.Report("a0").template_path.read_text()
    assert [name for name in REPORT_TEMPLATE_IDS if f'id="{name}"' not in template] == []
    assert report_template_problem(tabs_of_page) is None


#: Flyte's page as a template that renamed the container's id, or left the tabs outside it, renders it.
OTHER_TEMPLATES = {
    "renamed id": lambda page: page.replace('id="flyte-frame-container"', 'id="frame-container"'),
    "tabs outside the container": lambda page: page.replace(
        '<div id="flyte-frame-container">', '<div id="flyte-frame-container"></div><div>'),
}


@pytest.mark.parametrize("template", list(OTHER_TEMPLATES))
def test_a_template_the_page_cannot_be_read_back_by_skips_a0_s_tabs_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, template: str
) -> None:
    """The tabs rank 0's worker flushed stay as they are (no page a0 could not merge replaces them),
    and publishing raises nothing."""
    with process_of_the_action(tmp_path) as worker:
        for name, html in USER_TABS:
            worker.get_tab(name).log(html)
        flyte.report.flush()
    flushed = (tmp_path / "report.html").read_bytes()
    render = flyte.report.Report.get_final_report
    monkeypatch.setattr(flyte.report.Report, "get_final_report",
                        lambda self: OTHER_TEMPLATES[template](render(self)))
    monkeypatch.setattr(report_module, "_warned", set())
    problem = report_template_problem(tabs_of_page)
    assert problem is not None and ("'flyte-frame-container'" in problem) == (template == "renamed id")
    with process_of_the_action(tmp_path), pytest.warns(RootCauseUpstreamWarning) as warned:
        asyncio.run(publish_restarts((RESTART,)))
    assert [str(warning.message) for warning in warned if warning.category is RootCauseUpstreamWarning] == [
        f"{problem}: the {RESTARTS_TAB!r} report tab is not flushed, so that report.html keeps the tabs already "
        "flushed there"
    ]
    assert (tmp_path / "report.html").read_bytes() == flushed


@pytest.mark.slow
def test_a_failed_job_s_report_shows_rank_0_s_user_tab_and_the_failure_timeline(tmp_path: Path) -> None:
    """Two real ``a0`` pods of one worker each: rank 0's worker flushes a tab of its own, then the
    worker of the other pod raises; both pods flush the failure timeline, and the page keeps both."""
    fault = Fault(FaultKind.RAISE, pod="train-worker-1", local_rank=0)
    spec = JobSpec(task=report_tasks.train_with_a_user_tab, nnodes=2, nproc_per_node=1, root=tmp_path / "bucket",
                   fault=fault, timeout_s=180)
    result = run_job(spec, work_dir=tmp_path / "pods")
    logs = f"pod logs in {result.sim_dir}"
    assert not result.timed_out and result.error_document is not None, logs
    tabs = dict(tabs_of_page((result.output_prefix / "report.html").read_text()) or [])
    assert tabs.get(report_tasks.USER_TAB) == report_tasks.USER_HTML, logs
    assert TIMELINE_TAB in tabs and "train-worker-1" in tabs[TIMELINE_TAB] and "root cause" in tabs[TIMELINE_TAB], logs
    assert list(tabs).index(report_tasks.USER_TAB) < list(tabs).index(TIMELINE_TAB)
