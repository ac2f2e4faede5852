"""A failing ElasticRootCause task with decks on publishes the failure timeline next to its error."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest

from flytekitplugins_rootcause.report import DECK_NAME
from testbed.object_stores import ObjectStore
from tests.entrypoint_tasks.harness import list_names, new_prefixes, read_bytes, run_task

pytestmark = pytest.mark.slow


class _Classes(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.classes: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.classes += [value or "" for name, value in attrs if name == "class"]


def test_failure_timeline_deck_is_uploaded_with_the_root_cause_marked(file_store: ObjectStore) -> None:
    prefixes = new_prefixes(file_store, x=5, name="deck")
    run = run_task(file_store, prefixes, "elastic", "rank_one_fails_with_deck", _F_WN="pod-deck")
    assert run.returncode == 0, run.stderr[-2000:]  # flytekit exits 0 and reports through error files
    names = list_names(file_store, prefixes.output)
    assert "deck.html" in names, names
    page = read_bytes(file_store, f"{prefixes.output}/deck.html").decode()
    assert DECK_NAME in page and "pod-deck rank 1" in page
    parser = _Classes()
    parser.feed(page)
    assert parser.classes.count("root-cause") >= 2  # the SVG marker and the table row
