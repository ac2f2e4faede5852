"""The failing pods agree on one report through the rendezvous store, within a bounded wait.

Why: a backend that reads one error document per action shows the last writer's error. In Flyte 2
every pod writes the same ``error.pb``, so the last writer is a victim as often as not. If every pod
writes the *same* document, the order of the writes no longer matters. So each pod says what it saw
in the round's store, reads the others' words, and takes the first proposed report. A pod that cannot
reach the store writes its own best. How, step by step: ``docs/design.md``.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterable

from rootcause_engine.agent.bounded_store import STORE_ERRORS
from rootcause_engine.agent.diagnosis.agreed import AgreedReport, PodWord, agreed_report
from rootcause_engine.agent.diagnosis.pipeline import Diagnosis, Trigger
from rootcause_engine.agent.diagnosis.selection import RetryRule
from rootcause_engine.agent.peer_watch import PeerWatch
from rootcause_engine.agent.round_ledger import READ, SAID
from rootcause_engine.agent.round_store import RoundStore
from rootcause_engine.agent.store_values import bad_value
from rootcause_engine.settings import DEFAULT_AGREEMENT_TIMEOUT_S
from rootcause_engine.store_layout import said_key

logger = logging.getLogger(__name__)

#: Pause between two looks at the store for missing words.
POLL_S = 0.05


#: What the pod whose agent hung adds to its copy of the agreed report.
WATCHDOG_NOTE = (
    "This pod's torch elastic agent hung after its workers failed: the agent watchdog ended the pod "
    "after writing this report (agent_hang_timeout_s)."
)


def job_report(
    diagnosis: Diagnosis, peers: PeerWatch, *, worker: str, timeout_s: float, retry_rule: RetryRule
) -> AgreedReport | None:
    """The report this pod writes for the job: its ``diagnosis`` agreed with the other failing pods'.

    Why every front-end does this: the console shows whichever document is present when the first
    pod exits (the training operator decides the job then), so every pod's document must name the
    job's root cause, not only the culprit's. ``None`` for a diagnosis without a failure (a hung agent
    whose workers all succeeded): there is nothing to agree on. The pod whose watchdog fired says so
    in its own copy (the words hold failures, not how each pod ended).
    """
    if not diagnosis.failures:
        return None
    agreed = reach_agreement(peers, PodWord.of(worker, diagnosis), timeout_s=timeout_s, retry_rule=retry_rule)
    if diagnosis.trigger == Trigger.AGENT_HUNG:
        agreed = dataclasses.replace(agreed, message=f"{agreed.message}\n\n{WATCHDOG_NOTE}")
    return agreed


def reach_agreement(
    peers: PeerWatch,
    word: PodWord,
    *,
    timeout_s: float = DEFAULT_AGREEMENT_TIMEOUT_S,
    silent: Iterable[int] = (),
    retry_rule: RetryRule = RetryRule.ON_REQUEST,
) -> AgreedReport:
    """The report every failing pod of the job writes (see the module docstring).

    The pods not waited for: the peers the watch declared lost, the ones this pod's diagnosis found
    lost (``word.lost_pods``) and ``silent`` (group ranks). ``retry_rule``: the front-end's, for
    whether the agreed root cause allows a retry. Never raises for the store's sake.
    """
    own = agreed_report([word], retry_rule=retry_rule)
    access = peers.round_store()
    if access is None or access.world_size < 2:
        return own
    known_silent = {peer.group_rank for peer in word.lost_pods} | set(silent)

    def lost() -> set[int]:  # looked at again while waiting: a verdict reached meanwhile counts too
        return known_silent | {peer.group_rank for peer in peers.lost_pods.declared()}

    try:
        return _agree(access, word, own, lost, timeout_s, retry_rule)
    except STORE_ERRORS as error:
        logger.warning("the pods could not agree through the rendezvous store (%s): this pod writes its own", error)
        return own


def _agree(
    store: RoundStore,
    word: PodWord,
    own: AgreedReport,
    lost: Callable[[], set[int]],
    timeout_s: float,
    retry_rule: RetryRule,
) -> AgreedReport:
    deadline = time.monotonic() + timeout_s
    store.agreement.say(word.to_json())
    store.ledger.mark(SAID)
    words = {store.group_rank: word}
    while True:
        expected = set(range(store.world_size)) - lost()
        store.ledger.refresh()
        for rank in sorted((expected & store.ledger.ranks(SAID)) - words.keys()):
            value = store.agreement.word_of(rank)
            said = None if value is None else PodWord.from_json(value)
            if said is not None:
                words[rank] = said
            else:  # looked at again until the deadline: its pod may still write its real word
                bad_value(said_key(rank), "not a pod's word")
        if words.keys() >= expected or time.monotonic() >= deadline:
            break
        time.sleep(POLL_S)
    if not words.keys() >= expected:
        missing = sorted(expected - words.keys())
        logger.warning("no word from the pods of group ranks %s within %g s: agreeing without them", missing, timeout_s)
    proposal = agreed_report(list(words.values()), retry_rule=retry_rule)
    decided = AgreedReport.from_json(store.agreement.agree(proposal.to_json()))
    store.ledger.mark(READ)
    if store.hosts_store:
        _keep_store_until_read(store, set(words), deadline)
    if decided is None:
        logger.warning("the agreed report in the rendezvous store is not valid: this pod writes its own report")
        return own
    return decided


def _keep_store_until_read(store: RoundStore, readers: set[int], deadline: float) -> None:
    """The store's host stays until the pods of group ranks ``readers`` read the decision (or the
    deadline passes)."""
    while time.monotonic() < deadline:
        store.ledger.refresh()
        if store.ledger.ranks(READ) >= readers:
            return
        time.sleep(POLL_S)
