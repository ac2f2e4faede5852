"""A pod's word and the agreed report take another pod's times as wall-clock times only (issue 50):
an int of ns since the epoch within an int64 (``store_values.as_time_ns``), as the hang watch takes a
peer's wait start; a time out of that range costs the value its field belongs to."""

from __future__ import annotations

import json

import pytest

from rootcause_core.testimony import LostPod
from rootcause_engine.agent.diagnosis.agreed import AgreedReport, PodWord, agreed_report, failure_to_json
from rootcause_engine.agent.store_values import MAX_TIME_NS
from tests.rootcause_engine.agent.diagnosis.test_agreed import ROOT, T0

OUT_OF_RANGE = [-1, -(2**63), MAX_TIME_NS + 1]
IDS = ["before-the-epoch", "int64-min", "past-int64"]


def _word(**changes: object) -> str:
    word = json.loads(PodWord("w1", (ROOT,), (LostPod(2, "w2", T0),)).to_json())
    word.update(changes)
    return json.dumps(word)


@pytest.mark.parametrize("forged", OUT_OF_RANGE, ids=IDS)
def test_a_word_whose_failure_time_is_no_wall_clock_time_is_no_word(forged: int) -> None:
    assert PodWord.from_json(_word()) is not None
    assert PodWord.from_json(_word(failures=[{**failure_to_json(ROOT), "timestamp_ns": forged}])) is None


@pytest.mark.parametrize("forged", OUT_OF_RANGE, ids=IDS)
def test_a_lost_pod_whose_last_seen_time_is_no_wall_clock_time_is_left_out(forged: int) -> None:
    word = PodWord.from_json(_word(lost=[[2, "w2", forged], [3, "w3", T0], [4, "w4", None]]))
    assert word is not None and [peer.worker for peer in word.lost_pods] == ["w3", "w4"]


@pytest.mark.parametrize("forged", OUT_OF_RANGE, ids=IDS)
def test_a_report_whose_time_is_no_wall_clock_time_is_no_report(forged: int) -> None:
    report = json.loads(agreed_report([PodWord("w1", (ROOT,))]).to_json())
    assert AgreedReport.from_json(json.dumps(report)) is not None
    assert AgreedReport.from_json(json.dumps({**report, "timestamp_ns": forged})) is None
    assert AgreedReport.from_json(json.dumps({**report, "timestamp_ns": None})) is not None
