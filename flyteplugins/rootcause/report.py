"""The failure timeline (and the straggler check) in Flyte 2's report, for tasks that enable one.

The action has one ``report.html``, and each flush replaces it with the flushing process's tabs. Rank
0's workers flush theirs first, then the ``a0`` process flushes the timeline. Without care, ``a0``
would erase the user's tabs. So ``a0`` reads the page back and keeps its tabs, its own after them
(:func:`keep_flushed_tabs`), under the page's lock. Every failing pod flushes the same agreed page,
so which pod lands last does not matter. The page itself is the engine's, the same as flytekit's
Deck. ``docs/flyte2.md`` has the details.
"""

from __future__ import annotations

import contextlib
import logging
import warnings

import flyte
import flyte.report
import flyte.storage

from flyteplugins.rootcause.report_lock import report_lock, report_lock_sync
from flyteplugins.rootcause.report_page import tabs_of_page
from flyteplugins.rootcause.upstream import report_file, report_template_problem
from rootcause_engine.agent.diagnosis.agreed import AgreedReport
from rootcause_engine.agent.diagnosis.pipeline import RestartRow
from rootcause_engine.agent.diagnosis.timeline_page import restarts_html, timeline_html
from rootcause_engine.straggler.page import render_html
from rootcause_engine.straggler.report import StragglerReport
from rootcause_engine.upstream.readiness import Readiness, RootCauseUpstreamWarning

logger = logging.getLogger(__name__)

#: The report tab the timeline goes to.
TIMELINE_TAB = "Failure timeline"
#: The report tab of a launch that went through soft restarts.
RESTARTS_TAB = "Soft restarts"
#: The report tab of the straggler pre-check (``ElasticRootCause(straggler_check=...)``).
STRAGGLER_TAB = "Straggler check"
#: The report tab that says the diagnosis is off, or runs on an upstream version it was not verified on.
READINESS_TAB = "Root-cause diagnosis"


def timeline_page(agreed: AgreedReport, restarts: tuple[RestartRow, ...] = ()) -> str:
    """The tab's HTML: the timeline of the agreed failures, then the soft restarts (if any)."""
    page = timeline_html(agreed.failures) if agreed.failures else ""
    return page + (restarts_html(restarts) if restarts else "")


async def publish_timeline(agreed: AgreedReport, restarts: tuple[RestartRow, ...] = ()) -> None:
    """Log the timeline to its tab and flush the report (the task is about to raise)."""
    await publish_tab(TIMELINE_TAB, timeline_page(agreed, restarts))


async def publish_restarts(restarts: tuple[RestartRow, ...]) -> None:
    """A launch that healed through soft restarts: its restarts in their tab (nothing without any)."""
    if restarts:
        await publish_tab(RESTARTS_TAB, restarts_html(restarts))


async def publish_readiness(readiness: Readiness) -> None:
    """The diagnosis is off or not verified here: say so in its tab (nothing when it is verified)."""
    await publish_tab(READINESS_TAB, readiness.page)


def add_straggler_tab(report: StragglerReport) -> None:
    """The check's table and chart in their tab (the engine's page, flytekit's Deck), flushed with
    the next flush of this process's report."""
    try:
        flyte.report.get_tab(STRAGGLER_TAB).log(render_html(report))
    except Exception:  # the report is a view: it must never stop the task
        logger.exception("could not add the %s report tab", STRAGGLER_TAB)


def flush_straggler_tab(report: StragglerReport) -> None:
    """In a worker (rank 0): the tab, flushed now, from this worker's copy of the report."""
    add_straggler_tab(report)
    try:
        path = _page_path()
        with report_lock_sync(path) if path else contextlib.nullcontext():  # not mid-way through a0's merge
            flyte.report.flush()
    except Exception:
        logger.exception("could not flush the %s report tab", STRAGGLER_TAB)


async def keep_flushed_tabs(report: flyte.report.Report) -> None:
    """Put the tabs the action's ``report.html`` already holds into ``report`` (this process's), so
    that flushing it keeps them: rank 0's workers flushed the user's tabs there, and a flush replaces
    the whole page. A page that is not Flyte's report layout cannot be merged: it is replaced, as
    before."""
    tctx = flyte.ctx()
    if not tctx:
        return
    path = report_file(tctx.output_path)
    if not await flyte.storage.exists(path):
        return  # nothing flushed yet (no worker logged a tab, or the job failed before)
    page = b"".join([chunk async for chunk in flyte.storage.get_stream(path)]).decode("utf-8", errors="replace")
    flushed = tabs_of_page(page)
    if flushed is None:
        logger.warning("%s is not a page of Flyte 2's report: this flush replaces it", path)
        return
    put_flushed_tabs_first(report, flushed)


def put_flushed_tabs_first(report: flyte.report.Report, flushed: list[tuple[str, str]]) -> None:
    """``report``'s tabs become the ``flushed`` ones, in their order, then its own.

    A tab of the same name as one of this process's takes this process's content, in the flushed
    page's place: a straggler tab rank 0 flushed is the same table, and a timeline left under the same
    output prefix by an earlier run of the pods (a restart of the whole job) is stale.
    """
    own = {name: tab for name, tab in report.tabs.items() if tab.content}
    report.tabs.clear()
    for name, html in flushed:
        tab = report.get_tab(name)
        if html:
            tab.log(html)
    report.tabs.update(own)


async def publish_tab(tab: str, html: str) -> None:
    """Log ``html`` to ``tab`` and flush the report, keeping the tabs already flushed, under the
    page's lock; nothing at all where flyte's template cannot be read back (the page stays as it is)."""
    if not html:
        return
    try:
        problem = report_template_problem(tabs_of_page)
        if problem is not None:
            _warn_once(f"{problem}: the {tab!r} report tab is not flushed, so that report.html keeps the tabs "
                       "already flushed there")
            return
        report = flyte.report.current_report()
        report.get_tab(tab).log(html)
        path = _page_path()
        async with report_lock(path) if path else contextlib.nullcontext():
            await keep_flushed_tabs(report)
            await flyte.report.flush.aio()
    except Exception:  # the report is a view: it must never replace the task's own error
        logger.exception("could not publish the %s report tab", tab)


def _page_path() -> str | None:
    """This action's ``report.html`` to lock (``None`` outside a task, where a flush writes nothing, or
    where flyte no longer names it: the flush goes on unlocked, as before the lock)."""
    tctx = flyte.ctx()
    if not tctx:
        return None
    try:
        return report_file(tctx.output_path)
    except Exception:
        logger.warning("the report's path is unknown here: flushing it without its lock", exc_info=True)
        return None


_warned: set[str] = set()


def _warn_once(line: str) -> None:
    """Say ``line`` in the log and as a warning, once per process (every flush of the task meets it)."""
    if line in _warned:
        return
    _warned.add(line)
    logger.warning("%s", line)
    warnings.warn(line, RootCauseUpstreamWarning, stacklevel=3)
