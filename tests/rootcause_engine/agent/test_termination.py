"""The kubelet's SIGTERM: noted with its time, raised once as torch's ``SignalException`` while the
launch runs, raised as the launch starts when it came before, and only noted otherwise (a second
one, or one while the pod writes its report)."""

from __future__ import annotations

import signal

import pytest
from torch.distributed.elastic.multiprocessing.api import SignalException

from rootcause_core.pod_stop import PodStopNotice
from rootcause_engine.agent.termination import armed


def test_the_first_sigterm_of_the_launch_ends_it_and_later_ones_are_only_noted() -> None:
    notice = PodStopNotice()
    with armed(notice):
        with pytest.raises(SignalException) as raised:
            notice(signal.SIGTERM, None)
        notice(signal.SIGTERM, None)  # a second one: the pod is already on its way out
    assert raised.value.sigval == signal.SIGTERM
    assert notice.received and notice.count == 2


def test_a_sigterm_before_the_launch_ends_it_as_it_starts() -> None:
    """A pod stopped while it started (imports, inputs, the task's load) must not train: the launch
    ends at once, as stopped, with the time of the SIGTERM that came first."""
    notice = PodStopNotice()
    notice(signal.SIGTERM, None)
    first = notice.received_ns
    with pytest.raises(SignalException), armed(notice):
        pytest.fail("the launch started although the pod was already being stopped")
    assert notice.received_ns == first and notice.count == 1


def test_a_sigterm_after_the_launch_is_only_noted() -> None:
    """While the pod writes its own failure report (or its outputs), it must finish and exit 0."""
    notice = PodStopNotice()
    with armed(notice):
        pass
    notice(signal.SIGTERM, None)
    notice(signal.SIGTERM, None)
    assert notice.count == 2 and notice.received_ns is not None


def test_the_installed_handler_keeps_a_real_sigterm_from_ending_the_process() -> None:
    previous = signal.getsignal(signal.SIGTERM)
    try:
        notice = PodStopNotice()
        notice.install()
        signal.raise_signal(signal.SIGTERM)
        assert notice.count == 1
    finally:
        signal.signal(signal.SIGTERM, previous)
