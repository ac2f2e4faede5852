"""Flushes of the action's one ``report.html`` from several processes (``a0`` and rank 0's workers, or
the harness's pods on one machine) and threads at once lose no tab: each read, merge and write of
the page holds its lock (``flyteplugins.rootcause.report_lock``), and a lock not taken in time
flushes without it, with a warning, never a hang or a failed task."""

from __future__ import annotations

import asyncio
import fcntl
import multiprocessing
import os
import threading
import time
from pathlib import Path

import pytest

from flyteplugins.rootcause import report_lock
from flyteplugins.rootcause.report import STRAGGLER_TAB, flush_straggler_tab, publish_tab
from flyteplugins.rootcause.report_lock import lock_file_of, report_lock_sync
from flyteplugins.rootcause.report_page import tabs_of_page
from rootcause_engine.straggler.report import NodeResult, StragglerReport
from tests.flyteplugins.rootcause.action_context import process_of_the_action

#: Flushes per writer: each one a fresh report with one tab, so a lost flush stays lost.
FLUSHES = 20


def _tab(writer: str, flush: int) -> tuple[str, str]:
    """The one tab of ``writer``'s ``flush``-th flush (a page of some size, so a write takes a while)."""
    return f"{writer} #{flush}", f'<div class="w"><p>{writer} {flush}</p>{"<i>x</i>" * 400}</div>'


def _flush_tabs(output_path: str, writer: str, start: multiprocessing.synchronize.Event | None = None) -> None:
    """``FLUSHES`` flushes of one tab each, each from a fresh report (a process that flushes once)."""
    if start is not None:
        start.wait(60)
    for flush in range(FLUSHES):
        with process_of_the_action(Path(output_path)):
            asyncio.run(publish_tab(*_tab(writer, flush)))


def _tabs(output_path: Path) -> dict[str, str]:
    tabs = tabs_of_page((output_path / "report.html").read_text())
    assert tabs is not None, "report.html is not a whole page of Flyte 2's report"
    return dict(tabs)


def _expected(*writers: str) -> dict[str, str]:
    return dict(_tab(writer, flush) for writer in writers for flush in range(FLUSHES))


def test_two_processes_flushing_one_page_many_times_lose_no_tab(tmp_path: Path) -> None:
    spawn = multiprocessing.get_context("spawn")
    start = spawn.Event()
    writers = [spawn.Process(target=_flush_tabs, args=(str(tmp_path), f"pod-{i}", start)) for i in range(2)]
    for writer in writers:
        writer.start()
    start.set()
    for writer in writers:
        writer.join(240)
    assert [writer.exitcode for writer in writers] == [0, 0]
    assert _tabs(tmp_path) == _expected("pod-0", "pod-1")


def test_threads_of_one_process_flushing_one_page_lose_no_tab(tmp_path: Path) -> None:
    names = [f"thread-{i}" for i in range(3)]
    threads = [threading.Thread(target=_flush_tabs, args=(str(tmp_path), name)) for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(240)
    assert _tabs(tmp_path) == _expected(*names)


def _hold_the_lock(report_path: str, held: multiprocessing.synchronize.Event, seconds: float) -> None:
    """Another process of the pod (its flush stuck mid-way) holds the page's lock for ``seconds``."""
    with report_lock_sync(report_path):
        held.set()
        time.sleep(seconds)


def test_a_worker_s_flush_waits_for_the_lock_of_another_process(tmp_path: Path) -> None:
    nodes = [NodeResult(0, "pod-0", "h", 1, compute_score=1.0, comm_score=1.0, verdict="ok")]
    straggler = StragglerReport(nodes=nodes, threshold=1.3, network_threshold=2.0, rounds=2, action="warn")
    spawn = multiprocessing.get_context("spawn")
    held = spawn.Event()
    holder = spawn.Process(target=_hold_the_lock, args=(str(tmp_path / "report.html"), held, 1.0))
    holder.start()
    try:
        assert held.wait(60)
        started = time.monotonic()
        with process_of_the_action(tmp_path):
            flush_straggler_tab(straggler)
        waited = time.monotonic() - started
    finally:
        holder.join(60)
    assert 0.5 < waited < report_lock.LOCK_TIMEOUT_S
    assert list(_tabs(tmp_path)) == [STRAGGLER_TAB]


def test_a_lock_not_taken_in_time_flushes_without_it_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(report_lock, "LOCK_TIMEOUT_S", 0.3)
    lock_file = lock_file_of(str(tmp_path / "report.html"))
    assert lock_file.parent == tmp_path
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # a holder that never lets go (another open file: flock conflicts)
        started = time.monotonic()
        with process_of_the_action(tmp_path):
            asyncio.run(publish_tab(*_tab("a0", 0)))
        assert time.monotonic() - started < 5
    finally:
        os.close(fd)
    assert _tabs(tmp_path) == dict([_tab("a0", 0)])
    assert "was not taken within 0.3 s: flushing without it" in caplog.text


def test_a_page_in_the_object_store_is_locked_in_the_pod_s_temporary_directory() -> None:
    one, other = lock_file_of("s3://bucket/run/a0/report.html"), lock_file_of("s3://bucket/run/a1/report.html")
    assert one != other and one.parent == other.parent
    assert one == lock_file_of("s3://bucket/run/a0/report.html")
    assert lock_file_of("file:///outputs/report.html") == Path("/outputs/.report.html.lock")
