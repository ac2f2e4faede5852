"""Failures of the pod itself (``agent/diagnosis/pod_failures.py``): what each says and how it ranks.

A launch torch's agent ends in the rendezvous, before any worker ran, is still the pod's document:
a victim's, whose words say what happened there (the store went away, not every pod came, another
pod closed it) and where (the endpoint names the store's host pod). The kubelet's stop is a
candidate's, named by the pod's first rank when the rendezvous gave it one.
"""

from __future__ import annotations

import os
import signal

import pytest
from torch.distributed import DistNetworkError
from torch.distributed.elastic.rendezvous.api import (
    RendezvousClosedError,
    RendezvousConnectionError,
    RendezvousTimeoutError,
)

from rootcause_core.ordering import Role, TimeSource, order_failures
from rootcause_engine.agent.diagnosis.pod_failures import (
    STOP_MESSAGE,
    rendezvous_failure,
    stop_failure,
)

ENDPOINT = "train-worker-0:29400"


@pytest.mark.parametrize(
    ("error", "says"),
    [
        (DistNetworkError("Failed to recv, got 0 bytes."),
         "the rendezvous store at train-worker-0:29400 went away while the pods were still meeting, before this pod's"),
        (RendezvousConnectionError("The connection to the C10d store has failed."), "the rendezvous store at "
                                                                                   "train-worker-0:29400 went away"),
        (RendezvousTimeoutError(), "not every pod joined the rendezvous at train-worker-0:29400 in time"),
        (RendezvousClosedError(), "the rendezvous at train-worker-0:29400 was closed by another pod's agent"),
    ],
    ids=["store-lost", "store-unreachable", "timed-out", "closed"],
)
def test_a_failure_in_the_rendezvous_is_a_recoverable_victim_s_saying_what_happened_and_where(
    error: BaseException, says: str
) -> None:
    failure = rendezvous_failure(error, workers_started=False, endpoint=ENDPOINT, noticed_ns=42)
    assert failure.message.startswith(says), failure.message
    assert failure.message.endswith(f"): {type(error).__name__}: {error}" if str(error) else type(error).__name__)
    assert (failure.role, failure.recoverable, failure.timestamp_ns, failure.time_source) == (
        Role.VICTIM, True, 42, TimeSource.OBSERVED)
    assert (failure.pid, failure.global_rank, failure.signal_number) == (os.getpid(), None, None)


def test_a_store_lost_while_the_workers_ran_says_so_and_an_unknown_endpoint_is_left_out() -> None:
    failure = rendezvous_failure(DistNetworkError("Broken pipe"), workers_started=True)
    assert failure.message == ("the rendezvous store went away while this pod's workers ran, none of them failed "
                               "(the pod hosting it was stopped, lost or cut off): DistNetworkError: Broken pipe")


def test_the_kubelet_s_stop_is_a_candidate_named_by_the_pod_s_first_rank_and_ranks_before_the_victims() -> None:
    stop = stop_failure(10, first_rank=4, signals=2)
    assert (stop.role, stop.global_rank, stop.signal_number, stop.timestamp_ns) == (Role.CANDIDATE, 4,
                                                                                     signal.SIGTERM, 10)
    assert stop.message == f"{STOP_MESSAGE} (2 SIGTERMs)"
    lost = rendezvous_failure(DistNetworkError("Broken pipe"), workers_started=False, noticed_ns=5)
    assert order_failures([lost, stop])[0] is stop  # a candidate beats an earlier victim
