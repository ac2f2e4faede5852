"""``rootcause_harness/flyte2/verdict.py``: the pod and global rank an action's ``error.pb`` message names,
for this plugin's marked report and for upstream ``Elastic``'s error."""

from __future__ import annotations

import pytest

from rootcause_harness.flyte2.verdict import rootcause_verdict, upstream_verdict

PLACEMENT = {0: ("train-worker-0", 0), 1: ("train-worker-0", 1), 2: ("train-worker-1", 0), 3: ("train-worker-1", 1)}


def test_the_root_cause_line_names_its_pod_and_rank() -> None:
    message = ("[root cause] rank 3 (local rank 1, group rank 1) on worker train-worker-1 exited with SIGKILL\n"
               "[victim] rank 0 (local rank 0, group rank 0) on worker train-worker-0 timed out")
    assert rootcause_verdict(message) == ("train-worker-1", 3)


def test_the_first_marked_line_wins_even_after_unmarked_text() -> None:
    message = ("some preamble on worker nowhere at all\n"
               "[victim] rank 2 (local rank 0, group rank 0) on worker train-worker-1 collective failed\n"
               "[root cause] rank 0 (local rank 0, group rank 0) on worker train-worker-0 raised")
    assert rootcause_verdict(message) == ("train-worker-1", 2)


def test_a_lost_pod_line_names_the_pod_and_no_rank() -> None:
    message = "[lost pod] every process of the pod stopped on worker train-worker-0 (no exit reported)"
    assert rootcause_verdict(message) == ("train-worker-0", None)


@pytest.mark.parametrize("message", ["", "RuntimeError: injected failure", "[root cause] rank 3 on worker"])
def test_a_message_without_a_complete_marked_line_names_no_pod(message: str) -> None:
    assert rootcause_verdict(message)[0] is None


def test_upstreams_first_listed_rank_is_placed_on_the_pod_the_rendezvous_gave_it() -> None:
    message = ("ChildFailedError\nPyTorch worker(s) failed:\n  rank 2: exitcode=-9 (pid 123)\n"
               "  rank 3: exitcode=1 (pid 124)")
    assert upstream_verdict(message, PLACEMENT) == ("train-worker-1", 2)


def test_an_upstream_rank_with_no_recorded_placement_names_no_pod() -> None:
    message = "PyTorch worker(s) failed:\nrank 7: exitcode=1"
    assert upstream_verdict(message, PLACEMENT) == (None, 7)


def test_an_upstream_message_without_the_failed_ranks_list_names_nothing() -> None:
    assert upstream_verdict("rank 2: exitcode=1", PLACEMENT) == (None, None)
    assert upstream_verdict("[root cause] rank 3 (local rank 1) on worker train-worker-1 x", PLACEMENT) == (None, None)
