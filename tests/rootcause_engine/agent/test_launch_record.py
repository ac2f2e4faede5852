"""The record of a launch attempt (``rootcause_engine/agent/launch_record.py``): each worker's exit status,
whether it failed and when, from the most precise source there is, and a record taken of real child processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

from rootcause_core.ordering import TimeSource
from rootcause_engine.agent.death_watcher import DeathWatcher, ProcessExit
from rootcause_engine.agent.launch_ledger import LaunchedWorker
from rootcause_engine.agent.launch_observer import LaunchObserver
from rootcause_engine.agent.launch_record import (
    RECOVERABLE_MARKER_FILE_NAME,
    Detection,
    LaunchRecord,
    WorkerRecord,
    detections_by_rank,
    record_launch,
)
from rootcause_engine.worker.recorder import RecordedError, build_error_file

S = 1_000_000_000
T0 = 1_795_000_000 * S
LAUNCHED = LaunchedWorker(attempt=0, local_rank=0, global_rank=0, group_rank=0, pid=100, error_file="")


def _recorded(at: int | None) -> RecordedError:
    return RecordedError("ValueError: x", "tb", at, "builtins.ValueError", ("ValueError",), False, 0, 0, 0, "h", "p",
                         100)


def _worker(**fields: object) -> WorkerRecord:
    values: dict[str, object] = {"launched": LAUNCHED, "exit": None, "recorded": None}
    values.update(fields)
    return WorkerRecord(**values)  # type: ignore[arg-type]


def test_the_exit_status_is_the_watcher_s_else_torch_s_handle_else_torch_s_detection() -> None:
    assert _worker(exit=ProcessExit(100, T0, 3, None), torch_exitcode=7).exit_status() == (3, None)
    assert _worker(exit=ProcessExit(100, T0, None, 9), torch_exitcode=7).exit_status() == (None, 9)
    # the watcher saw the exit without its status (torch reaped first): torch's handle knows it
    assert _worker(exit=ProcessExit(100, T0, None, None), torch_exitcode=-6).exit_status() == (None, 6)
    assert _worker(torch_exitcode=2, detection=Detection(T0 // S, 5)).exit_status() == (2, None)
    assert _worker(detection=Detection(T0 // S, -15)).exit_status() == (None, 15)
    assert _worker().exit_status() == (None, None)


def test_a_worker_failed_when_it_recorded_an_error_was_killed_exited_non_zero_or_exited_without_its_result() -> None:
    assert _worker(recorded=_recorded(T0), exit=ProcessExit(100, T0, 0, None)).failed
    assert _worker(exit=ProcessExit(100, T0, None, int(signal.SIGKILL))).failed
    assert _worker(exit=ProcessExit(100, T0, 1, None)).failed
    assert _worker(exit=ProcessExit(100, T0, 0, None), exited_without_result=True).failed
    assert _worker(detection=Detection(None, None)).failed  # torch reported it, nothing else is known
    assert not _worker(exit=ProcessExit(100, T0, 0, None)).failed
    assert not _worker(exit=ProcessExit(100, T0, 0, None), detection=Detection(T0 // S, 0)).failed
    assert not _worker().failed  # still running


def test_the_failure_time_comes_from_the_most_precise_source_there_is() -> None:
    exit_ = ProcessExit(100, T0 + S, 1, None)
    detection = Detection(T0 // S + 5, 1)
    assert _worker(recorded=_recorded(T0), exit=exit_, detection=detection).failure_time() == (T0, TimeSource.RECORDED)
    # an error file torch alone wrote has no precise time: the observed exit is better
    assert _worker(recorded=_recorded(None), exit=exit_).failure_time() == (T0 + S, TimeSource.OBSERVED)
    assert _worker(detection=detection).failure_time() == (T0 + 5 * S, TimeSource.DETECTED)
    assert _worker(detection=Detection(None, 1)).failure_time() == (None, TimeSource.UNKNOWN)
    assert _worker().failure_time() == (None, TimeSource.UNKNOWN)


def test_a_launch_record_lists_its_failed_workers_their_first_failure_and_every_exit() -> None:
    ok = _worker(exit=ProcessExit(100, T0 + 3 * S, 0, None))
    late = _worker(exit=ProcessExit(101, T0 + 2 * S, 1, None))
    early = _worker(recorded=_recorded(T0 + S))
    untimed = _worker(detection=Detection(None, 1))
    record = LaunchRecord(0, (ok, late, early, untimed))
    assert record.failed_workers == (late, early, untimed)
    assert record.first_failure_ns == T0 + S
    assert record.exits_ns == (T0 + 3 * S, T0 + 2 * S)
    assert LaunchRecord(0, (ok,)).first_failure_ns is None


def test_torch_s_detections_are_read_by_global_rank_from_its_child_failed_error() -> None:
    failures = {3: ProcessFailure(local_rank=1, pid=4242, exitcode=-9, error_file="<N/A>"),
                2: ProcessFailure(local_rank=0, pid=4241, exitcode=1, error_file="<N/A>")}
    detections = detections_by_rank(ChildFailedError("train", failures))
    assert detections == {3: Detection(failures[3].timestamp, -9), 2: Detection(failures[2].timestamp, 1)}
    assert detections_by_rank(None) == {} and detections_by_rank(RuntimeError("no failures")) == {}


def _child(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code])


def _wait_unreaped(process: subprocess.Popen[bytes]) -> None:
    """Block until ``process`` ended, leaving it for the watcher to read (as torch's workers are)."""
    os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT)


def test_a_record_of_real_workers_reads_their_exits_error_files_markers_and_torch_s_detections(
    tmp_path: Path, watcher: DeathWatcher
) -> None:
    observer = LaunchObserver(watcher)
    empty = record_launch(observer)
    assert (empty.attempt, empty.workers) == (None, ())

    raised_dir = tmp_path / "attempt_1" / "0"
    raised_dir.mkdir(parents=True)
    error_file = raised_dir / "error.json"
    error_file.write_text(json.dumps(build_error_file(ValueError("bad batch"), T0)))
    (raised_dir / RECOVERABLE_MARKER_FILE_NAME).write_text("")
    raised, killed, clean = _child("raise SystemExit(1)"), _child("import time; time.sleep(60)"), _child("pass")
    processes = (raised, killed, clean)
    try:
        for rank, (process, error) in enumerate(zip(processes, (str(error_file), "", str(tmp_path / "none.json")),
                                                    strict=True)):
            observer.ledger.add_worker(LaunchedWorker(1, rank, 4 + rank, 2, process.pid, error))
        observer.ledger.add_worker(LaunchedWorker(0, 0, 4, 2, clean.pid, ""))  # an earlier attempt: not recorded
        killed.send_signal(signal.SIGKILL)
        for process in processes:
            _wait_unreaped(process)
        before = time.time_ns()
        observer.ledger.note_teardown(1)
        child_failed = ChildFailedError("train", {4: ProcessFailure(0, raised.pid, 1, "<N/A>")})
        record = record_launch(observer, child_failed, ask_kernel=True)
    finally:
        for process in processes:
            process.kill()
            process.wait()

    assert record.attempt == 1 and record.taken_ns >= before
    assert record.teardown_ns is not None and record.teardown_ns >= before
    assert (record.signals_ns, record.teardown_done_ns) == (None, None)
    first, second, third = record.workers
    assert [w.launched.pid for w in record.workers] == [p.pid for p in processes]
    assert first.exit_status() == (1, None) and first.recoverable_marker
    assert first.recorded is not None and first.recorded.message == "ValueError: bad batch"
    assert first.failure_time() == (T0, TimeSource.RECORDED)
    assert first.detection == Detection(child_failed.failures[4].timestamp, 1)
    assert second.exit_status() == (None, int(signal.SIGKILL)) and second.recorded is None
    assert not second.recoverable_marker and second.failure_time()[1] == TimeSource.OBSERVED
    assert third.exit_status() == (0, None) and not third.failed and third.recorded is None
    assert third.detection is None and third.probe is None and not third.exited_without_result
    assert record.failed_workers == (first, second)
    # after the teardown the record reads what the watcher holds, without asking the kernel again
    again = record_launch(observer)
    assert [w.exit for w in again.workers] == [w.exit for w in record.workers]
