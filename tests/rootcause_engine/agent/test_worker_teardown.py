"""The teardown policy (``agent/worker_teardown.py``): whom to probe, then SIGTERM, the grace, SIGKILL.

Real processes throughout: plain child processes stand in for workers, one ignoring SIGTERM, some with
the hang probe installed. No assertion bounds how fast anything happens: a grace is checked as a lower
bound (the kill came no earlier), and a shorter grace winning over a long one as an exit long before
the long one would have allowed.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from rootcause_engine.agent import worker_teardown
from rootcause_engine.agent.death_watcher import DeathWatcher
from rootcause_engine.agent.launch_ledger import LaunchedWorker, LaunchLedger
from rootcause_engine.agent.worker_teardown import WorkerTeardown
from rootcause_engine.worker.hang_probe import STACKS_FILE_NAME
from rootcause_engine.worker.recorder import build_error_file
from tests.rootcause_engine.agent.probed_workers import start_probed_worker
from tests.rootcause_engine.agent.test_teardown_start import _wait_until_waitable

NEVER_S = 120.0
#: A configured teardown grace no test waits for: an exit before it shows a shorter grace was used.
LONG_GRACE_S = 120.0


_IGNORES_SIGTERM = """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print('ready', flush=True)
time.sleep(600)
"""


def _error_file(tmp_path: Path, name: str, message: str | None) -> str:
    """A worker's error file: the error it recorded (``message``), or none written (``None``)."""
    path = tmp_path / name / "error.json"
    path.parent.mkdir()
    if message is not None:
        path.write_text(json.dumps(build_error_file(RuntimeError(message), time.time_ns())))
    return str(path)


def _child(code: str) -> subprocess.Popen[str]:
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    return child


def _reap(*children: subprocess.Popen[str] | subprocess.Popen[bytes]) -> None:
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
        ledger = LaunchLedger(watcher)
        teardown = WorkerTeardown(ledger, teardown_grace_s=LONG_GRACE_S)
        for local_rank, child in enumerate((dead, plain, stubborn)):
            ledger.add_worker(LaunchedWorker(0, local_rank, local_rank, 0, child.pid, error_file=""))
        grace_s = 0.5
        teardown.end_workers(0, grace_s=grace_s)
        moments = ledger.teardown_of(0)
        teardown_ns, signals_ns, done_ns = moments.began_ns, moments.signals_ns, moments.done_ns
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
        teardown.end_workers(0)
        assert ledger.teardown_of(0) == moments
    finally:
        _reap(dead, plain, stubborn)


def test_only_a_worker_that_failed_on_its_own_is_left_to_exit_by_itself_and_a_victim_is_ended_at_once(
    tmp_path: Path, watcher: DeathWatcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker whose recorded error could be the root cause is spared its SIGTERM a while (its own
    exit code in the report); one that recorded a victim's error (a peer's connection closed), or
    none, gets it with the first signals, as torch's teardown gives it."""
    sleep = "import time; print('ready', flush=True); time.sleep(600)"
    children = [_child(sleep) for _ in range(3)]
    messages = ["bad batch", "[gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.2]:5000", None]
    calls: list[dict[str, Any]] = []

    def spied(pids: Any, **kwargs: Any) -> list[int]:
        calls.append({"pids": list(pids), "spared": list(kwargs["spared"])})
        return terminate_then_kill(calls[-1]["pids"], **kwargs)

    terminate_then_kill = worker_teardown.terminate_then_kill
    monkeypatch.setattr(worker_teardown, "terminate_then_kill", spied)
    try:
        ledger = LaunchLedger(watcher)
        for index, (child, message) in enumerate(zip(children, messages, strict=True)):
            assert child.stdout is not None and child.stdout.readline() == "ready\n"
            error_file = _error_file(tmp_path, f"w{index}", message)
            ledger.add_worker(LaunchedWorker(0, index, index, 0, child.pid, error_file))
        WorkerTeardown(ledger, teardown_grace_s=LONG_GRACE_S).end_workers(0, grace_s=4.0)
        candidate, victim, silent = (child.pid for child in children)
        assert calls == [{"pids": [candidate, victim, silent], "spared": [candidate]}]
        for child in children:
            exit_ = watcher.confirm_exit(child.pid)
            assert exit_ is not None and exit_.signal_number == signal.SIGTERM
    finally:
        _reap(*children)


# --- the probe before the teardown -----------------------------------------------------------------

def _probed_worker(tmp_path: Path, name: str, recorded: str | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """A live worker with the probe installed; ``recorded``: the error it already recorded (it is unwinding)."""
    error_dir = tmp_path / name
    error_dir.mkdir()
    error_file = error_dir / "error.json"
    child = start_probed_worker(error_dir)
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
        ledger = LaunchLedger(watcher)
        teardown = WorkerTeardown(ledger, teardown_grace_s=LONG_GRACE_S, probe_before_teardown=True)
        idle_worker = LaunchedWorker(0, 0, 0, 0, idle.pid, idle_file)
        raised_worker = LaunchedWorker(0, 1, 1, 0, raised.pid, raised_file)
        ledger.add_worker(idle_worker)
        ledger.add_worker(raised_worker)
        teardown.probe_live_workers(0)  # a failure that names its own cause: nothing to ask
        assert teardown.probe_of(idle_worker) is None
        teardown.end_workers(0, probe=True, grace_s=5.0)
        answer = teardown.probe_of(idle_worker)
        assert answer is not None and "in stuck_in_user_code" in answer.stacks
        assert answer.asked_ns <= (ledger.teardown_of(0).signals_ns or 0)
        assert teardown.probe_of(raised_worker) is None
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
        ledger = LaunchLedger(watcher)
        teardown = WorkerTeardown(ledger, teardown_grace_s=LONG_GRACE_S, probe_before_teardown=False)
        worker = LaunchedWorker(0, 0, 0, 0, idle.pid, idle_file)
        ledger.add_worker(worker)
        teardown.end_workers(0, probe=True, grace_s=5.0)
        assert teardown.probe_of(worker) is None
        stacks = Path(idle_file).parent / STACKS_FILE_NAME
        assert stacks.read_text() == ""  # the worker never dumped its stacks: it was never signalled
    finally:
        _reap(idle)


# --- when a probe is worth its second ---------------------------------------------------------------


def test_only_a_failure_that_a_peer_s_hang_explains_makes_the_teardown_probe_first(tmp_path: Path) -> None:
    """The probe costs a teardown up to a second: asked for only when a worker timed out in a
    collective (gloo's text) or died by SIGABRT without an error file (NCCL's watchdog)."""
    watcher = DeathWatcher()
    try:
        ledger = LaunchLedger(watcher)
        teardown = WorkerTeardown(ledger, probe_before_teardown=True)
        timeout = "[gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 3000ms for recv operation"
        ledger.add_worker(LaunchedWorker(0, 0, 0, 0, 2**22 + 1, _error_file(tmp_path, "a", "bad batch")))
        assert not teardown.stall_suspected(0)  # a worker's own exception: nothing to ask the others
        ledger.add_worker(LaunchedWorker(0, 1, 1, 0, 2**22 + 2, _error_file(tmp_path, "b", timeout)))
        assert teardown.stall_suspected(0)
        assert not teardown.stall_suspected(1)  # another attempt
    finally:
        watcher.close()


def test_a_sigabrt_without_an_error_file_is_a_suspected_stall(tmp_path: Path) -> None:
    aborted = subprocess.Popen([sys.executable, "-c", "import os; os.abort()"])
    watcher = DeathWatcher()
    try:
        ledger = LaunchLedger(watcher)
        teardown = WorkerTeardown(ledger)
        ledger.add_worker(LaunchedWorker(0, 0, 0, 0, aborted.pid, _error_file(tmp_path, "a", None)))
        _wait_until_waitable(aborted.pid)
        assert watcher.confirm_exit(aborted.pid) is not None
        assert teardown.stall_suspected(0)
    finally:
        watcher.close()
        aborted.wait()
