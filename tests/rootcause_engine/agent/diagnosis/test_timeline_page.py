"""The failure timeline page (``rootcause_engine/agent/diagnosis/timeline_page.py``): an SVG that places each
failure on one time axis with the root cause marked, a table of the failures, and the soft restarts, all escaped."""

from __future__ import annotations

import re
import signal
import xml.etree.ElementTree as ElementTree

from rootcause_core.ordering import Role, TimeSource
from rootcause_core.timeline import build_timeline
from rootcause_engine.agent.diagnosis.failures import WorkerFailure
from rootcause_engine.agent.diagnosis.timeline_page import restarts_html, timeline_html, timeline_svg
from tests.worker_failures import worker_failure

SVG = "{http://www.w3.org/2000/svg}"
S = 1_000_000_000
T0 = 1_700_000_000 * S


def _svg(page: str) -> ElementTree.Element:
    """The page's SVG, parsed as XML (a malformed one fails here)."""
    match = re.search(r"<svg .*?</svg>", page, re.DOTALL)
    assert match is not None, page
    return ElementTree.fromstring(match.group(0))


def _failures() -> list[WorkerFailure]:
    return [
        worker_failure(0, timestamp_ns=T0 + 100_000_000, message="ValueError: bad batch",
                       time_source=TimeSource.RECORDED),
        worker_failure(1, timestamp_ns=T0 + 500_000_000, role=Role.VICTIM, signal_number=int(signal.SIGTERM)),
        worker_failure(2, timestamp_ns=T0, role=Role.CANDIDATE, exitcode=3),
        worker_failure(3, timestamp_ns=None, role=Role.VICTIM, exitcode=1),
    ]


def test_each_failure_is_a_marker_at_its_offset_on_the_axis_and_the_root_cause_is_marked() -> None:
    svg = _svg(timeline_html(_failures()))
    groups = {group.get("class"): group for group in svg.iter(f"{SVG}g")}
    assert set(groups) == {"root-cause", "victim", "candidate"}  # the untimed worker has no marker
    cx = {name: float(group.find(f"{SVG}circle").get("cx")) for name, group in groups.items()}  # type: ignore[union-attr]
    # the earliest failure (rank 2) is the axis' origin, the latest (rank 1, +500 ms) its end
    assert cx == {"candidate": 230.0, "root-cause": 230.0 + 520 * 0.2, "victim": 750.0}
    assert groups["root-cause"].find(f"{SVG}circle").get("r") == "8"  # type: ignore[union-attr]
    assert groups["root-cause"].findtext(f"{SVG}title") == "root-cause: ValueError: bad batch (+100.0 ms)"
    ticks = [text.text for text in svg.iter(f"{SVG}text") if (text.text or "").endswith(" ms")]
    assert ticks == ["+0 ms", "+125 ms", "+250 ms", "+375 ms", "+500 ms"]


def test_an_untimed_failure_keeps_its_row_with_a_question_mark() -> None:
    svg = _svg(timeline_html(_failures()))
    texts = [text.text for text in svg.iter(f"{SVG}text")]
    assert "pod-1 rank 3" in texts and "?" in texts
    assert svg.get("height") == str(40 + 28 * 4 + 30)


def test_the_table_lists_the_failures_root_cause_first_with_time_offset_and_source() -> None:
    page = timeline_html(_failures())
    rows = re.findall(r"<tr( class=\"root-cause\")?><td>(.*?)</td><td>(.*?)</td><td>(.*?)</td><td>(.*?)</td>"
                      r"<td>(.*?)</td><td>(.*?)</td></tr>", page)
    assert rows == [
        (' class="root-cause"', "root-cause", "pod-0 rank 0", "2023-11-14T22:13:20.100000000Z", "+100.0 ms", "recorded",
         "ValueError: bad batch"),
        ("", "victim", "pod-0 rank 1", "2023-11-14T22:13:20.500000000Z", "+500.0 ms", "observed",
         "killed by SIGTERM (the agent&#x27;s teardown after another worker failed)"),
        ("", "candidate", "pod-1 rank 2", "2023-11-14T22:13:20.000000000Z", "+0.0 ms", "observed",
         "exited with code 3"),
        ("", "victim", "pod-1 rank 3", "unknown time", "?", "observed", "exited with code 1"),
    ]
    assert "<script" not in page


def test_user_text_is_escaped_and_control_characters_made_visible() -> None:
    hostile = worker_failure(0, worker="<img src=x onerror=alert(1)>", message="ValueError: </svg><script>\x00\x1b[2J")
    page = timeline_html([hostile])
    assert "<script>" not in page and "<img" not in page
    assert "&lt;/svg&gt;&lt;script&gt;\\x00\\x1b[2J" in page
    svg = _svg(page)  # still one well-formed SVG
    assert svg.findtext(f"{SVG}g/{SVG}title", "").startswith("root-cause: ValueError: </svg><script>\\x00")


def test_a_single_failure_sits_at_the_origin_of_a_millisecond_axis() -> None:
    entries = build_timeline([worker_failure(0, timestamp_ns=T0, exitcode=1)], ["exited with code 1"])
    svg = ElementTree.fromstring(timeline_svg(entries))
    assert [circle.get("cx") for circle in svg.iter(f"{SVG}circle")][-1] == "230.0"
    ticks = [text.text for text in svg.iter(f"{SVG}text") if (text.text or "").endswith(" ms")]
    assert ticks == ["+0 ms", "+0 ms", "+0 ms", "+1 ms", "+1 ms"]


def test_a_lost_pod_gets_a_row_and_a_marker_of_its_own() -> None:
    failures = [worker_failure(0, timestamp_ns=T0, exitcode=1),
                worker_failure(1, timestamp_ns=T0 + S, role=Role.LOST_POD, exitcode=None)]
    svg = _svg(timeline_html(failures))
    lost = [group for group in svg.iter(f"{SVG}g") if group.get("class") == "lost-pod"]
    assert len(lost) == 1 and lost[0].find(f"{SVG}circle").get("fill") == "#1f77b4"  # type: ignore[union-attr]


def test_the_soft_restarts_table_has_one_escaped_row_per_change() -> None:
    page = restarts_html([(T0, "pod-1", "left", "<b>rank 3</b> raised"), (T0 + S, "pod-1", "joined", "")])
    assert page.startswith("<h3>Soft restarts</h3>")
    rows = re.findall(r"<tr><td>(.*?)</td><td>(.*?)</td><td>(.*?)</td><td>(.*?)</td></tr>", page)
    assert rows == [
        ("2023-11-14T22:13:20.000000000Z", "pod-1", "left", "&lt;b&gt;rank 3&lt;/b&gt; raised"),
        ("2023-11-14T22:13:21.000000000Z", "pod-1", "joined", ""),
    ]
    assert re.findall("<tr><td>", restarts_html([])) == []
