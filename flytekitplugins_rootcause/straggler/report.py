"""The straggler report as a flytekit Deck (the page is the engine's, ``rootcause_engine.straggler.page``)."""

from __future__ import annotations

from rootcause_engine.straggler.page import render_html
from rootcause_engine.straggler.report import StragglerReport

DECK_NAME = "Straggler check"

__all__ = ["DECK_NAME", "publish_deck", "render_html"]


def publish_deck(report: StragglerReport) -> None:
    """Add the Deck to the current Flyte context (shown when the task has ``enable_deck=True``)."""
    import flytekit

    flytekit.Deck(DECK_NAME, render_html(report))
