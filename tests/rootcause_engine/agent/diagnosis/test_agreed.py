"""One report from the failing pods' words: the agreement's pure part (no store, no processes)."""

from __future__ import annotations

import dataclasses
import itertools

from rootcause_core.ordering import Role, TimeSource
from rootcause_core.roles import rank_from_report
from rootcause_core.testimony import LostPod, Member
from rootcause_engine.agent.diagnosis.agreed import AgreedReport, PodWord, agreed_report
from rootcause_engine.agent.diagnosis.failures import WorkerFailure
from rootcause_engine.agent.diagnosis.selection import RetryRule
from rootcause_harness.flyte2.verdict import rootcause_verdict
from tests.worker_failures import worker_failure

S = 1_000_000_000
T0 = 1_795_000_000 * S


def failure(pod: str, rank: int, ns: int, role: Role, message: str, *, recoverable: bool = False) -> WorkerFailure:
    return worker_failure(
        rank, role=role, timestamp_ns=ns, worker=pod, host="vm", exitcode=1, exception_type="builtins.RuntimeError",
        message=message, traceback="Traceback (most recent call last):\n  boom\n", time_source=TimeSource.RECORDED,
        recoverable=recoverable, source=f"/tmp/{pod}/{rank}/error.json",
    )


ROOT = failure("pod-1", 3, T0 + 500, Role.CANDIDATE, "RuntimeError: out of memory")
VICTIM_0 = failure("pod-0", 0, T0 + 90_000_000, Role.VICTIM, "RuntimeError: Connection closed by peer")
VICTIM_1 = failure("pod-1", 2, T0 + 80_000_000, Role.VICTIM, "RuntimeError: Connection closed by peer")
WORDS = [PodWord("pod-0", (VICTIM_0,)), PodWord("pod-1", (ROOT, VICTIM_1)), PodWord("pod-2", (VICTIM_0,))]


def test_every_order_of_the_same_words_gives_the_same_report_naming_the_root_cause_first() -> None:
    reports = {agreed_report(list(order)) for order in itertools.permutations(WORDS)}
    assert len(reports) == 1
    [report] = reports
    first_line = report.message.splitlines()[0]
    assert first_line.startswith("[root cause] rank 3 ") and "on worker pod-1" in first_line
    assert ".000000500Z" in first_line  # the nanosecond time
    assert rootcause_verdict(report.message) == ("pod-1", 3)
    assert (report.worker, report.global_rank, report.timestamp_ns) == ("pod-1", 3, T0 + 500)
    assert report.testified == ("pod-0", "pod-1", "pod-2") and not report.recoverable
    assert report.message.index("victim: rank 2") < report.message.index("victim: rank 0")  # victims, by time


def test_recoverability_follows_the_root_cause_not_the_victims() -> None:
    recoverable_root = PodWord("pod-1", (failure("pod-1", 3, T0, Role.CANDIDATE, "x", recoverable=True),))
    assert agreed_report([PodWord("pod-0", (VICTIM_0,)), recoverable_root]).recoverable
    assert not agreed_report(WORDS).recoverable


def test_by_flyte_2_s_rule_only_a_root_cause_that_forbids_retries_is_not_recoverable() -> None:
    """Flyte 2 retries every task error but ``NonRecoverableError``: the same rule for the job's root
    cause, whatever the victims raised."""
    assert agreed_report(WORDS, retry_rule=RetryRule.UNLESS_REFUSED).recoverable  # a plain RuntimeError
    refused = dataclasses.replace(ROOT, exception_type="flyte.errors.NonRecoverableError", retry_refused=True)
    words = [PodWord("pod-0", (VICTIM_0,)), PodWord("pod-1", (refused, VICTIM_1))]
    assert not agreed_report(words, retry_rule=RetryRule.UNLESS_REFUSED).recoverable
    # the fact travels through the store with the word
    said = PodWord.from_json(words[1].to_json())
    assert said is not None and said.failures[0].retry_refused


def test_a_pod_that_said_nothing_and_that_its_peers_found_lost_is_the_root_cause() -> None:
    members = (Member(0, "pod-0", 0, 2, True), Member(1, "pod-1", 2, 2))
    lost = (LostPod(1, "pod-1", T0 - S),)
    report = agreed_report([PodWord("pod-0", (VICTIM_0,), lost, members)])
    assert report.message.startswith("[lost pod] rank 2 (ranks 2-3) (group rank 1) on worker pod-1 ")
    assert rootcause_verdict(report.message) == ("pod-1", None) and rank_from_report(report.message) is None
    assert (report.worker, report.global_rank, report.timestamp_ns, report.recoverable) == ("pod-1", 2, T0 - S, True)


def test_a_peer_found_lost_that_spoke_after_all_is_not_named_lost() -> None:
    said_lost = PodWord("pod-0", (VICTIM_0,), (LostPod(1, "pod-1", None),))
    report = agreed_report([said_lost, PodWord("pod-1", (ROOT,))])
    assert report.message.startswith("[root cause] rank 3 ") and "is lost" not in report.message


def test_words_and_reports_survive_the_store_and_garbage_is_refused() -> None:
    word = PodWord("pod-0", (VICTIM_0,), (LostPod(1, "pod-1", None),), (Member(0, "pod-0", 0, 2, True),))
    assert PodWord.from_json(word.to_json()) == word
    report = agreed_report(WORDS)
    assert AgreedReport.from_json(report.to_json()) == report
    for garbage in (b"", b"{}", b"[1]", b'{"format": 1}', b"\xff", b'{"format": 99, "worker": "x"}'):
        assert PodWord.from_json(garbage) is None and AgreedReport.from_json(garbage) is None
