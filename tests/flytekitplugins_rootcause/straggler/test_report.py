"""``flytekitplugins_rootcause.straggler.report``: the straggler report as a flytekit Deck of the engine's page."""

from __future__ import annotations

from flytekitplugins_rootcause.straggler import report as deck
from rootcause_engine.straggler import page
from rootcause_engine.straggler.decision import OK, SLOW_COMPUTE
from rootcause_engine.straggler.report import NodeResult, StragglerReport
from tests.flytekitplugins_rootcause.straggler.flytekit_decks import task_decks


def _report(*, skipped: str = "") -> StragglerReport:
    nodes = [NodeResult(0, "train-worker-0", "h0", 1, compute_s=[0.01], verdict=OK),
             NodeResult(1, "train-worker-1", "h1", 1, compute_s=[0.04], verdict=SLOW_COMPUTE)]
    return StragglerReport(nodes=nodes, threshold=1.3, network_threshold=2.0, action="warn", skipped=skipped)


def test_the_page_is_the_engine_s() -> None:
    assert deck.render_html is page.render_html
    assert deck.__all__ == ["DECK_NAME", "publish_deck", "render_html"]


def test_publishing_adds_one_deck_named_for_the_check_with_the_report_s_page() -> None:
    report = _report()
    with task_decks() as decks:
        deck.publish_deck(report)
    (published,) = decks
    assert published.name == deck.DECK_NAME == "Straggler check"
    assert published.html == page.render_html(report)
    assert "<table" in published.html and "train-worker-1" in published.html and SLOW_COMPUTE in published.html


def test_a_skipped_check_s_deck_says_why_it_was_skipped() -> None:
    with task_decks() as decks:
        deck.publish_deck(_report(skipped="1 node(s), the check needs at least min_nodes=2"))
    (published,) = decks
    assert "straggler check skipped: 1 node(s), the check needs at least min_nodes=2" in published.html
    assert "<table" not in published.html
