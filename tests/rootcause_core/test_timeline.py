"""The failure timeline: shared layout, the text bars, and the Deck's HTML (parsed, not eyeballed)."""

from __future__ import annotations

import signal
from html.parser import HTMLParser

from flytekitplugins_rootcause.report import timeline_html
from rootcause_core.ordering import Role
from rootcause_core.timeline import ROOT_CAUSE, build_timeline, span_s, text_bar
from rootcause_engine.agent.diagnosis.failures import WorkerFailure
from tests.worker_failures import worker_failure

T0 = 1_795_000_000_000_000_000


def failure(rank: int, offset_ms: float | None, role: Role, *, signal_number: int | None = None,
            message: str = "") -> WorkerFailure:
    ts = None if offset_ms is None else T0 + int(offset_ms * 1e6)
    return worker_failure(rank, role=role, timestamp_ns=ts, host="host", signal_number=signal_number, message=message)


FAILURES = [
    failure(3, 0, Role.CANDIDATE, signal_number=int(signal.SIGKILL)),
    failure(0, 12.5, Role.VICTIM, message="RuntimeError: Connection closed by peer <&>"),
    failure(1, 40, Role.VICTIM, signal_number=int(signal.SIGTERM)),
    failure(2, None, Role.VICTIM),
]


def test_layout_offsets_from_the_earliest_failure_and_marks_the_root_cause() -> None:
    entries = build_timeline(FAILURES)
    assert [e.role for e in entries] == [ROOT_CAUSE, "victim", "victim", "victim"]
    assert [e.offset_s for e in entries] == [0.0, 0.0125, 0.04, None]
    assert entries[0].label == "pod-1 rank 3"
    assert span_s(entries) == 0.04
    bars = [text_bar(e, span_s(entries), width=11) for e in entries]
    assert bars[0] == "★··········" and bars[2] == "··········✕" and bars[3].strip() == "?"


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_deck_html_is_self_contained_and_marks_the_root_cause() -> None:
    page = timeline_html(FAILURES)
    parser = _Collector()
    parser.feed(page)
    tags = [tag for tag, _ in parser.tags]
    assert "script" not in tags and "svg" in tags
    assert not any(attrs.get("src") or attrs.get("href") for _, attrs in parser.tags), "no external resources"
    root_groups = [attrs for tag, attrs in parser.tags if tag == "g" and attrs.get("class") == "root-cause"]
    assert len(root_groups) == 1
    root_rows = [attrs for tag, attrs in parser.tags if tag == "tr" and attrs.get("class") == "root-cause"]
    assert len(root_rows) == 1
    text = "".join(parser.text)
    assert "root cause" in text and "pod-1 rank 3" in text and "killed by SIGKILL" in text
    assert "Connection closed by peer <&>" in text  # escaped in the page, intact once parsed
    assert "<&>" not in page
