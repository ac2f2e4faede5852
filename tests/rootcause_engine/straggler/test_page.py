"""The report as a self-contained HTML page (``rootcause_engine/straggler/page.py``): table, chart, settings line."""

from __future__ import annotations

import re

from rootcause_engine.straggler.page import render_html
from rootcause_engine.straggler.report import NodeResult, StragglerReport
from tests.rootcause_engine.straggler.made_reports import report


def test_deck_is_self_contained_html_with_a_table_and_an_svg_chart() -> None:
    html = render_html(report("ok", "slow-compute", "ok", "ok"))
    assert "<table>" in html and html.count("<tr>") == 5
    assert "<svg" in html and html.count("<rect") == 8  # two bars per node
    assert not re.search(r"<script|https?://(?!www\.w3\.org/2000/svg)", html)
    assert "&lt;b&gt;" in render_html(StragglerReport(nodes=[NodeResult(0, "<b>", "h", 1)]))  # escaped


def test_a_skipped_check_shows_its_reason_and_no_table_or_chart() -> None:
    html = render_html(StragglerReport(skipped="1 node(s), the check needs at least min_nodes=2"))
    assert "<h3>straggler check skipped: 1 node(s), the check needs at least min_nodes=2</h3>" in html
    assert "<table>" not in html and "<svg" not in html


def test_the_settings_line_names_what_the_check_ran_with() -> None:
    rep = report("ok", "ok", "ok")
    rep.min_excess_s, rep.device, rep.backend, rep.dtype = 0.001, "cpu", "gloo", "float32"
    rep.matmul_size, rep.allreduce_numel, rep.wall_time_s = 256, 65536, 1.234
    html = render_html(rep)
    assert (
        "min excess 1 ms, 2 round(s), cpu/gloo/float32, matmul 256, all-reduce 65536 elements, action warn, "
        "check took 1.23 s; slow links cannot be localized with fewer than 4 nodes</p>"
    ) in html
    assert "cannot be localized" not in render_html(report("ok", "ok", "ok", "ok"))


def test_each_verdict_has_its_color_and_a_failed_node_shows_its_error() -> None:
    rep = report("ok", "slow-network", "failed")
    rep.nodes[2].error = "rank 4, round 1: compute step raised <RuntimeError>"
    rep.nodes[2].compute_score = rep.nodes[2].comm_score = None
    html = render_html(rep)
    assert '<b style="color:#2e7d32">ok</b>' in html
    assert '<b style="color:#c62828">slow-network</b>' in html
    failed = '<b style="color:#6d6d6d">failed</b><br><small>rank 4, round 1: compute step raised &lt;RuntimeError&gt;'
    assert failed in html
    assert html.count("<rect") == 4  # the failed node has no scores, so no bars


def test_the_table_shows_groups_times_and_scores_of_each_node() -> None:
    html = render_html(report("ok", "slow-compute"))
    row = re.findall(r"<tr>(.*?)</tr>", html)[2]  # header, node 0, node 1
    cells = re.findall(r"<td>(.*?)</td>", row)
    assert cells[:9] == ["1", "pod-1", "host-1", "2", "{0,1} / {1,2}", "0.0100 / 0.0110", "0.0020 / -", "2.00", "1.00"]


def test_the_chart_draws_each_threshold_applied_the_higher_of_configured_and_raised() -> None:
    rep = report("ok", "ok")
    rep.compute_threshold_applied = 1.9  # raised by noise above the configured 1.3
    html = render_html(rep)
    assert "<title>compute threshold 1.9x</title>" in html
    assert "<title>network threshold 1.5x</title>" in html
    assert "node 0 compute: 1.00x" in html and "node 1 network: 1.00x" in html
