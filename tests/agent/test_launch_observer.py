"""The launch observer (``agent/launch_observer.py``): its ledger of times, its teardown, its reads of torch's state.

Real processes throughout: workers started by torch's own ``start_processes`` (``fork``: no interpreter
start-up) routed through :func:`observing_launch` as torch's agent calls it, and plain child processes
for the teardown. No assertion bounds how fast anything happens: a grace is checked as a lower bound
(the kill came no earlier), and a shorter grace winning over a long one as an exit long before the
long one would have allowed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from torch.distributed.elastic.agent.server import local_elastic_agent
from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs

from rootcause_engine.agent.death_watcher import DeathWatcher
from rootcause_engine.agent.launch_observer import LaunchedWorker, LaunchObserver, observing_launch
from rootcause_engine.worker.hang_probe import READY_FILE_NAME, STACKS_FILE_NAME
from rootcause_engine.worker.recorder import build_error_file
from tests.agent.test_teardown_start import _wait_until_waitable

NEVER_S = 120.0
#: A configured teardown grace no test waits for: an exit before it shows a shorter grace was used.
LONG_GRACE_S = 120.0


@pytest.fixture
def watcher() -> Iterator[DeathWatcher]:
    with DeathWatcher() as running:
        yield running


@pytest.fixture(autouse=True)
def _signal_handlers_restored() -> Iterator[None]:
    """torch's process context installs its own SIGTERM/SIGINT/SIGHUP/SIGQUIT handlers in the agent
    (here: pytest's process); the tests after these get the process's handlers back."""
    signals = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
    saved = {signum: signal.getsignal(signum) for signum in signals}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


# --- workers as torch's agent starts them (module level: the forked workers run them) ----------------


def _return_rank() -> int:
    return int(os.environ["RANK"])


def _local_rank_0_exits_0_without_returning() -> int:
    if os.environ["LOCAL_RANK"] == "0":
        os._exit(0)
    time.sleep(NEVER_S)
    return 1


def _agent_start(tmp_path: Path, entrypoint: Any, args: dict[int, tuple[Any, ...]],
                 envs: dict[int, dict[str, str]]) -> Any:
    """Start workers as torch's ``LocalElasticAgent`` does: through the global of its module."""
    return local_elastic_agent.start_processes(
        name="observed",
        entrypoint=entrypoint,
        args=args,
        envs=envs,
        logs_specs=DefaultLogsSpecs(log_dir=str(tmp_path / "logs")),
        start_method="fork" if callable(entrypoint) else "spawn",
    )


def _envs(attempt: int, group_rank: int, first_rank: int, count: int) -> dict[int, dict[str, str]]:
    return {
        local: {
            "RANK": str(first_rank + local),
            "LOCAL_RANK": str(local),
            "GROUP_RANK": str(group_rank),
            "TORCHELASTIC_RESTART_COUNT": str(attempt),
        }
        for local in range(count)
    }


def _wait(pcontext: Any) -> Any:
    result = pcontext.wait(timeout=NEVER_S, period=0.02)
    assert result is not None, "torch's workers never finished"
    return result


def _observed_launch(observer: LaunchObserver, tmp_path: Path, entrypoint: Any, args: dict[int, tuple[Any, ...]],
                     envs: dict[int, dict[str, str]]) -> Any:
    """Start the workers within ``observing_launch`` and wait for torch's result of them."""
    with observing_launch(observer):
        pcontext = _agent_start(tmp_path, entrypoint, args, envs)
        try:
            return _wait(pcontext)
        finally:
            pcontext.close()


def test_every_worker_torch_s_agent_starts_is_registered_with_its_ranks_attempt_and_error_file(
    tmp_path: Path, watcher: DeathWatcher
) -> None:
    """Within ``observing_launch`` torch's agent's ``start_processes`` registers each worker (pid, local,
    global and group rank, the attempt from ``TORCHELASTIC_RESTART_COUNT``, torch's error file); the
    results count as delivered only once torch's poll collected every return value; after the block
    torch's own function is back."""
    original = local_elastic_agent.start_processes
    observer = LaunchObserver(watcher, teardown_grace_s=LONG_GRACE_S)
    with observing_launch(observer):
        assert local_elastic_agent.start_processes is not original
        pcontext = _agent_start(tmp_path, _return_rank, {0: (), 1: ()}, _envs(attempt=2, group_rank=1, first_rank=4,
                                                                             count=2))
        try:
            assert observer.last_attempt() == 2
            workers = observer.workers_of(2)
            assert {w.pid for w in workers} == set(pcontext.pids().values())
            assert sorted((w.local_rank, w.global_rank, w.group_rank) for w in workers) == [(0, 4, 1), (1, 5, 1)]
            assert {w.local_rank: w.error_file for w in workers} == dict(pcontext.error_files)
            assert observer.workers_of(0) == []
            result = _wait(pcontext)
        finally:
            pcontext.close()
    assert local_elastic_agent.start_processes is original
    assert result.return_values == {0: 4, 1: 5}
    assert observer.results_delivered(2) is True
    for worker in workers:
        assert observer.torch_exitcode(worker) == 0
        assert not observer.exited_without_result(worker)  # exit 0 after its result was delivered


def test_a_function_worker_exiting_0_before_returning_is_torch_s_failure_and_its_peer_is_ended(
    tmp_path: Path, watcher: DeathWatcher
) -> None:
    """torch's join would count ``os._exit(0)`` as a success and wait for ever for the other worker; the
    observer's join makes torch report that worker failed, ends the other one (a victim, after the
    teardown began), and says the worker exited without its result."""
    observer = LaunchObserver(watcher, teardown_grace_s=LONG_GRACE_S)
    result = _observed_launch(observer, tmp_path, _local_rank_0_exits_0_without_returning, {0: (), 1: ()},
                              _envs(attempt=0, group_rank=0, first_rank=0, count=2))
    assert result.is_failed() and set(result.failures) == {0}
    assert result.failures[0].exitcode == 0
    early, peer = sorted(observer.workers_of(0), key=lambda w: w.local_rank)
    assert observer.results_delivered(0) is False
    assert observer.exited_without_result(early)
    teardown_ns = observer.teardown_ns(0)
    early_exit, peer_exit = observer.exit_of(early), watcher.confirm_exit(peer.pid)
    assert teardown_ns is not None and early_exit is not None and peer_exit is not None
    assert early_exit.exit_ns <= teardown_ns <= peer_exit.exit_ns
    # ended by the teardown's SIGTERM (the forked worker inherits the agent's handler, torch's, so it
    # may exit 1 rather than by the signal): anything but a success
    assert (peer_exit.exitcode, peer_exit.signal_number) != (0, None)
    assert not observer.exited_without_result(peer)  # killed by a signal: no claim about its result
    assert observer.teardown_done_ns(0) is not None


def test_a_binary_launch_has_no_results_to_deliver_and_its_exit_codes_are_torch_s(
    tmp_path: Path, watcher: DeathWatcher
) -> None:
    """A binary worker may legitimately exit 0 at any time: never "exited without its result"; the exit
    code is read from torch's own process handle, which reaps it."""
    observer = LaunchObserver(watcher)
    result = _observed_launch(observer, tmp_path, "/bin/sh", {0: ("-c", "exit 0"), 1: ("-c", "exit 5")},
                              _envs(attempt=1, group_rank=0, first_rank=0, count=2))
    assert result.is_failed() and set(result.failures) == {1}
    zero, five = sorted(observer.workers_of(1), key=lambda w: w.local_rank)
    assert observer.results_delivered(1) is None
    assert (observer.torch_exitcode(zero), observer.torch_exitcode(five)) == (0, 5)
    assert not observer.exited_without_result(zero)


# --- the teardown ------------------------------------------------------------------------------------

_IGNORES_SIGTERM = """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print('ready', flush=True)
time.sleep(600)
"""


def _child(code: str) -> subprocess.Popen[str]:
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    return child


def _reap(*children: subprocess.Popen[str]) -> None:
    for child in children:
        if child.poll() is None:
            child.kill()
        child.wait()


def test_ending_workers_terminates_then_kills_under_the_shorter_grace_and_stamps_each_phase_once(
    watcher: DeathWatcher,
) -> None:
    """SIGTERM ends a plain worker, SIGKILL one that ignores it (no earlier than the grace asked for, and
    long before the configured one); a worker dead before the teardown is no victim; the teardown's
    start, first signal and end are stamped in order, and a second teardown changes none of them."""
    dead = _child("raise SystemExit(3)")
    plain = _child("import time; print('ready', flush=True); time.sleep(600)")
    stubborn = _child(_IGNORES_SIGTERM)
    try:
        for child in (plain, stubborn):
            assert child.stdout is not None and child.stdout.readline() == "ready\n"
        _wait_until_waitable(dead.pid)
        observer = LaunchObserver(watcher, teardown_grace_s=LONG_GRACE_S)
        for local_rank, child in enumerate((dead, plain, stubborn)):
            observer.add_worker(LaunchedWorker(0, local_rank, local_rank, 0, child.pid, error_file=""))
        grace_s = 0.5
        observer.end_workers(0, grace_s=grace_s)
        teardown_ns, signals_ns, done_ns = observer.teardown_ns(0), observer.signals_ns(0), observer.teardown_done_ns(0)
        assert teardown_ns is not None and signals_ns is not None and done_ns is not None
        assert teardown_ns <= signals_ns <= done_ns
        exits = {child.pid: watcher.confirm_exit(child.pid) for child in (dead, plain, stubborn)}
        assert all(exit_ is not None for exit_ in exits.values())
        dead_exit, plain_exit, stubborn_exit = (exits[c.pid] for c in (dead, plain, stubborn))
        assert dead_exit is not None and (dead_exit.exitcode, dead_exit.signal_number) == (3, None)
        assert dead_exit.exit_ns <= teardown_ns
        assert plain_exit is not None and plain_exit.signal_number == signal.SIGTERM
        assert stubborn_exit is not None and stubborn_exit.signal_number == signal.SIGKILL
        lived_s = (stubborn_exit.exit_ns - signals_ns) / 1e9
        assert grace_s - 0.1 <= lived_s < LONG_GRACE_S, lived_s  # 0.1 s: wall clock here, monotonic there
        observer.end_workers(0)
        assert (observer.teardown_ns(0), observer.signals_ns(0), observer.teardown_done_ns(0)) == (
            teardown_ns, signals_ns, done_ns)
    finally:
        _reap(dead, plain, stubborn)


def test_the_ledger_keeps_each_attempt_s_times_apart_and_the_first_stamp_of_each_wins() -> None:
    """A restart's teardown is not the previous attempt's: each attempt has its own stamps, and a later
    call (the watchdog after the join wrapper, torch's close after both) keeps the first."""
    watcher = DeathWatcher()  # the pids are no children of this process: recorded as gone, no thread needed
    try:
        observer = LaunchObserver(watcher)
        assert observer.last_attempt() is None
        observer.add_worker(LaunchedWorker(0, 0, 0, 0, 2**22 + 11, ""))
        observer.add_worker(LaunchedWorker(1, 0, 0, 0, 2**22 + 12, ""))
        assert observer.last_attempt() == 1
        assert [w.pid for w in observer.workers_of(1)] == [2**22 + 12]
        first = observer.note_teardown(0)
        assert observer.teardown_ns(1) is None and observer.signals_ns(0) is None
        signals = observer.note_signals(0)
        observer.note_teardown_done(0)
        done = observer.teardown_done_ns(0)
        assert done is not None and first <= signals <= done
        assert observer.note_teardown(0) == first and observer.note_signals(0) == signals
        observer.note_teardown_done(0)
        assert observer.teardown_done_ns(0) == done
        second = observer.note_teardown(1)
        assert second >= first and observer.teardown_ns(0) == first
    finally:
        watcher.close()


def test_the_rendezvous_and_exit_barrier_phases_are_noted_as_the_watchdog_reads_them() -> None:
    watcher = DeathWatcher()
    try:
        observer = LaunchObserver(watcher)
        assert observer.rendezvous_since_ns is None and observer.exit_barrier_since_ns is None
        before = time.time_ns()
        observer.on_rendezvous(True)
        since = observer.rendezvous_since_ns
        assert since is not None and since >= before
        observer.on_rendezvous(False)
        assert observer.rendezvous_since_ns is None
        observer.on_exit_barrier(True)
        entered = observer.exit_barrier_since_ns
        assert entered is not None and observer.exit_barrier_left_ns is None
        observer.on_exit_barrier(False)
        left = observer.exit_barrier_left_ns
        assert observer.exit_barrier_since_ns is None and left is not None and left >= entered
    finally:
        watcher.close()


# --- the probe before the teardown -----------------------------------------------------------------

#: A worker stand-in with the probe installed (no torch: the probe's stacks need none), then idle.
_PROBED = """
import sys, time
from rootcause_engine.worker.hang_probe import install_hang_probe
assert install_hang_probe(sys.argv[1])
def waiting_for_a_peer():
    time.sleep(600)
waiting_for_a_peer()
"""


def _probed_worker(tmp_path: Path, name: str, recorded: str | None = None) -> tuple[subprocess.Popen[str], str]:
    """A live worker with the probe installed; ``recorded``: the error it already recorded (it is unwinding)."""
    error_dir = tmp_path / name
    error_dir.mkdir()
    error_file = error_dir / "error.json"
    child = subprocess.Popen([sys.executable, "-c", _PROBED, str(error_file)], text=True)
    deadline = time.monotonic() + NEVER_S
    while not (error_dir / READY_FILE_NAME).exists():
        assert child.poll() is None, "the worker died before installing its probe"
        assert time.monotonic() < deadline
        time.sleep(0.01)
    if recorded is not None:
        error_file.write_text(json.dumps(build_error_file(RuntimeError(recorded), time.time_ns())))
    return child, str(error_file)


def test_live_workers_are_probed_once_before_a_teardown_they_were_asked_for_and_not_otherwise(
    tmp_path: Path, watcher: DeathWatcher
) -> None:
    """With ``probe_before_teardown``: no probe when nothing suggests a hang and no peer asked; when asked
    (another pod's failure), each live worker is asked where it is before it is ended, except one that
    recorded its own error (its failure is known); its answer is kept for the diagnosis."""
    idle, idle_file = _probed_worker(tmp_path, "idle")
    raised, raised_file = _probed_worker(tmp_path, "raised", recorded="bad batch")
    try:
        observer = LaunchObserver(watcher, teardown_grace_s=LONG_GRACE_S, probe_before_teardown=True)
        idle_worker = LaunchedWorker(0, 0, 0, 0, idle.pid, idle_file)
        raised_worker = LaunchedWorker(0, 1, 1, 0, raised.pid, raised_file)
        observer.add_worker(idle_worker)
        observer.add_worker(raised_worker)
        observer.probe_live_workers(0)  # a failure that names its own cause: nothing to ask
        assert observer.probe_of(idle_worker) is None
        observer.end_workers(0, probe=True, grace_s=5.0)
        answer = observer.probe_of(idle_worker)
        assert answer is not None and "waiting_for_a_peer" in answer.stacks
        assert answer.asked_ns <= (observer.signals_ns(0) or 0)
        assert observer.probe_of(raised_worker) is None
        for child in (idle, raised):
            exit_ = watcher.confirm_exit(child.pid)
            assert exit_ is not None and exit_.signal_number == signal.SIGTERM
    finally:
        _reap(idle, raised)


def test_without_probe_before_teardown_no_worker_is_asked_even_when_a_peer_asks(
    tmp_path: Path, watcher: DeathWatcher
) -> None:
    idle, idle_file = _probed_worker(tmp_path, "idle")
    try:
        observer = LaunchObserver(watcher, teardown_grace_s=LONG_GRACE_S, probe_before_teardown=False)
        worker = LaunchedWorker(0, 0, 0, 0, idle.pid, idle_file)
        observer.add_worker(worker)
        observer.end_workers(0, probe=True, grace_s=5.0)
        assert observer.probe_of(worker) is None
        stacks = Path(idle_file).parent / STACKS_FILE_NAME
        assert stacks.read_text() == ""  # the worker never dumped its stacks: it was never signalled
    finally:
        _reap(idle)
