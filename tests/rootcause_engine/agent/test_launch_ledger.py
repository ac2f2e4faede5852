"""The launch ledger (``agent/launch_ledger.py``): each attempt's workers and the moments of its teardown
and of the agent's phases, the first stamp of each winning.

The moment a teardown began must come after every exit the kernel already reports, whatever the
watcher thread saw: that is ``tests/rootcause_engine/agent/test_teardown_start.py``.
"""

from __future__ import annotations

import time

from rootcause_engine.agent.death_watcher import DeathWatcher
from rootcause_engine.agent.launch_ledger import LaunchedWorker, LaunchLedger, Teardown


def test_the_ledger_keeps_each_attempt_s_times_apart_and_the_first_stamp_of_each_wins() -> None:
    """A restart's teardown is not the previous attempt's: each attempt has its own stamps, and a later
    call (the watchdog after the join wrapper, torch's close after both) keeps the first."""
    watcher = DeathWatcher()  # the pids are no children of this process: recorded as gone, no thread needed
    try:
        ledger = LaunchLedger(watcher)
        assert ledger.last_attempt() is None
        ledger.add_worker(LaunchedWorker(0, 0, 0, 0, 2**22 + 11, ""))
        ledger.add_worker(LaunchedWorker(1, 0, 0, 0, 2**22 + 12, ""))
        assert ledger.last_attempt() == 1
        assert [w.pid for w in ledger.workers_of(1)] == [2**22 + 12]
        first = ledger.note_teardown(0)
        assert ledger.teardown_of(1) == Teardown() and ledger.teardown_of(0) == Teardown(began_ns=first)
        signals = ledger.note_signals(0)
        ledger.note_teardown_done(0)
        done = ledger.teardown_of(0).done_ns
        assert done is not None and first <= signals <= done
        assert ledger.note_teardown(0) == first and ledger.note_signals(0) == signals
        ledger.note_teardown_done(0)
        assert ledger.teardown_of(0) == Teardown(first, signals, done)
        second = ledger.note_teardown(1)
        assert second >= first and ledger.teardown_of(0).began_ns == first
    finally:
        watcher.close()


def test_the_rendezvous_and_exit_barrier_phases_are_noted_as_the_watchdog_reads_them() -> None:
    """The watchdog gives each phase its own time limit: it reads when the agent entered the phase it is
    in, and when it last left the exit barrier."""
    watcher = DeathWatcher()
    try:
        ledger = LaunchLedger(watcher)
        assert ledger.rendezvous_since_ns is None and ledger.exit_barrier_since_ns is None
        before = time.monotonic_ns()  # the watchdog's deadlines are monotonic: a wall-clock step moves none
        ledger.on_rendezvous(True)
        since = ledger.rendezvous_since_ns
        assert since is not None and since >= before
        ledger.on_rendezvous(False)
        assert ledger.rendezvous_since_ns is None
        ledger.on_exit_barrier(True)
        entered = ledger.exit_barrier_since_ns
        assert entered is not None and ledger.exit_barrier_left_ns is None
        ledger.on_exit_barrier(False)
        left = ledger.exit_barrier_left_ns
        assert ledger.exit_barrier_since_ns is None and left is not None and left >= entered
    finally:
        watcher.close()
