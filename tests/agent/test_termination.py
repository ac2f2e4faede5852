"""The kubelet's SIGTERM: noted with its time, raised once as torch's ``SignalException`` while the
launch runs, and only noted otherwise (a second one, or one while the pod writes its report)."""

from __future__ import annotations

import signal

import pytest
from torch.distributed.elastic.multiprocessing.api import SignalException

from rootcause_engine.agent.termination import TerminationNotice


def test_the_first_sigterm_of_the_launch_ends_it_and_later_ones_are_only_noted() -> None:
    notice = TerminationNotice()
    with notice.armed():
        with pytest.raises(SignalException) as raised:
            notice(signal.SIGTERM, None)
        notice(signal.SIGTERM, None)  # a second one: the pod is already on its way out
    assert raised.value.sigval == signal.SIGTERM
    assert notice.received and notice.count == 2


def test_a_sigterm_outside_the_launch_is_only_noted() -> None:
    """While the pod writes its own failure report (or its outputs), it must finish and exit 0."""
    notice = TerminationNotice()
    notice(signal.SIGTERM, None)
    with notice.armed():
        notice(signal.SIGTERM, None)  # the launch started after the stop was noted: nothing to end twice
    assert notice.count == 2 and notice.received_ns is not None


def test_the_installed_handler_keeps_a_real_sigterm_from_ending_the_process() -> None:
    previous = signal.getsignal(signal.SIGTERM)
    try:
        notice = TerminationNotice()
        with notice.installed():
            signal.raise_signal(signal.SIGTERM)
        assert notice.count == 1
    finally:
        signal.signal(signal.SIGTERM, previous)
