"""The failure timeline as a Flyte Deck (flytekit's view of a
:class:`~rootcause_engine.agent.diagnosis.pipeline.Diagnosis`).

The failing task publishes it before it raises, so the Flyte console shows, next to the error,
every worker's failure on one time axis with the root cause marked. The page itself is the
engine's (:mod:`rootcause_engine.agent.diagnosis.timeline_page`, shared with Flyte 2's report);
this module only hands it to flytekit.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from rootcause_engine.agent.diagnosis.pipeline import Diagnosis, RestartRow
from rootcause_engine.agent.diagnosis.timeline_page import restarts_html as restarts_html
from rootcause_engine.agent.diagnosis.timeline_page import timeline_html as timeline_html
from rootcause_engine.upstream.readiness import Readiness

logger = logging.getLogger(__name__)

DECK_NAME = "Failure timeline"

#: Deck of a soft-restart launch: every node that left and rejoined the job, in order.
RESTARTS_DECK_NAME = "Soft restarts"

#: Deck of a pod whose diagnosis is off or runs on an upstream version it was not verified on.
READINESS_DECK_NAME = "Root-cause diagnosis"


def publish_timeline_deck(diagnosis: Diagnosis) -> None:
    """Add the diagnosis' timeline Deck to the current Flyte context (shown when the task enables
    decks), with the soft restarts the job went through before, if any."""
    from flytekit import Deck

    restarts = diagnosis.restarts
    Deck(DECK_NAME, timeline_html(diagnosis.failures) + (restarts_html(restarts) if restarts else ""))


def publish_restarts_deck(restarts: Sequence[RestartRow]) -> None:
    """Add the soft-restart Deck of a launch that healed and succeeded (nothing without restarts)."""
    from flytekit import Deck

    if restarts:
        Deck(RESTARTS_DECK_NAME, restarts_html(restarts))


def publish_readiness_deck(readiness: Readiness) -> None:
    """Tell the user in the Deck that the diagnosis is off or not verified here (nothing when it is
    verified). Never raises: the pod may be about to run upstream's path, which must not fail here."""
    if readiness.ok:
        return
    try:
        from flytekit import Deck

        Deck(READINESS_DECK_NAME, readiness.page)
    except Exception:
        logger.exception("could not publish the %s Deck", READINESS_DECK_NAME)
