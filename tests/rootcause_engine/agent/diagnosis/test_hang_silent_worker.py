"""A live worker that answers nothing when probed: named hung when it is stopped (SIGSTOP) or when its
progress beacon went silent long before the probe, outside the collective its peers timed out in.

Real processes: a stand-in with the probe installed, stopped by a real SIGSTOP, probed by the agent's
own ``probe_workers``; the rule itself on the answers it gives.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from rootcause_core.collectives import CollectivePosition
from rootcause_engine.agent.diagnosis.hang import hang_verdict
from rootcause_engine.agent.worker_probe import ProbeAnswer, probe_workers
from rootcause_engine.worker.progress_beacon import FORMAT, BeaconReading, GroupProgress, beacon_path
from tests.rootcause_engine.agent.probed_workers import NEVER_S, start_probed_worker

STALLED = CollectivePosition("1", 4, "gloo:all_reduce", 1_000_000_000)
S = 1_000_000_000


def _write_beacon(error_file: str, pid: int, written_ns: int, entered: int, completed: int) -> None:
    reading = BeaconReading(pid, written_ns, 0, (GroupProgress("0", 2, 2), GroupProgress("1", entered, completed)))
    assert reading.to_json()["format"] == FORMAT
    Path(beacon_path(error_file)).write_text(json.dumps(reading.to_json()))


def _wait_stopped(pid: int) -> None:
    deadline = time.monotonic() + NEVER_S
    while True:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            if handle.read().rsplit(")", 1)[1].split()[0] in ("T", "t"):
                return
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_a_stopped_worker_answers_nothing_and_is_the_hung_rank(tmp_path: Path) -> None:
    """SIGSTOPped after its last beat (all_reduce #3 of group 1): its answer is its state and that beat;
    its peers timed out in #4: hung, stamped before their timeout, its state in the message."""
    error_dir = tmp_path / "frozen"
    error_dir.mkdir()
    proc = start_probed_worker(error_dir, "sleep")
    error_file = str(error_dir / "error.json")
    try:
        _write_beacon(error_file, proc.pid, time.time_ns(), 3, 3)
        os.kill(proc.pid, signal.SIGSTOP)
        _wait_stopped(proc.pid)
        answer = probe_workers([(proc.pid, error_file)], wait_s=1.0)[proc.pid]
        assert answer.silent and answer.stopped and answer.state == "T", answer
        assert "stopped by a signal" in answer.state_words, answer
        assert answer.beacon is not None and answer.beacon.group("1") == GroupProgress("1", 3, 3)
        stalled = CollectivePosition("1", 4, "gloo:all_reduce", answer.asked_ns - 8 * S)
        verdict = hang_verdict(answer, stalled, 3)
        assert verdict is not None, answer
        assert verdict.last_progress_ns == stalled.entered_ns  # before any peer's timeout
        message = verdict.message()
        assert "never entered all_reduce #4 of process group 1" in message, message
        assert "its last was collective #3 of process group 1, by its last progress beat" in message, message
        assert "process state T (stopped by a signal" in message, message
        assert verdict.stacks_text() == ""
    finally:
        proc.kill()
        proc.wait()


def _silent(state: str, beacon: BeaconReading | None, asked_ns: int = 20 * S) -> ProbeAnswer:
    return ProbeAnswer(pid=2, asked_ns=asked_ns, stacks="", collectives=None, state=state, state_words=state,
                       beacon=beacon)


def test_a_silent_running_worker_is_hung_only_when_its_beacon_stopped_outside_the_stalled_collective() -> None:
    behind = BeaconReading(2, 5 * S, 0, (GroupProgress("1", 3, 3),))
    waiting = BeaconReading(2, 5 * S, 0, (GroupProgress("1", 4, 3, since_ns=2 * S),))
    fresh = BeaconReading(2, 19 * S, 0, (GroupProgress("1", 3, 3),))
    # not stopped, beacon silent 15 s, its last beat behind #4: it runs nothing (uninterruptible), hung
    verdict = hang_verdict(_silent("D", behind), STALLED, 3)
    assert verdict is not None and "never entered all_reduce #4" in verdict.message()
    # its beacon beat a second ago: a process that runs, its silence to the probe says nothing
    assert hang_verdict(_silent("S", fresh), STALLED, 3) is None
    # its last beat was inside #4: a waiting peer, not the one waited for
    assert hang_verdict(_silent("D", waiting), STALLED, 3) is None
    # no beacon and not stopped: nothing to judge by
    assert hang_verdict(_silent("S", None), STALLED, 3) is None
    # no stall: no verdict, stopped or not
    assert hang_verdict(_silent("T", behind), None, 3) is None


def test_a_stopped_worker_is_hung_even_without_a_beacon_or_inside_the_stalled_collective() -> None:
    verdict = hang_verdict(_silent("T", None), STALLED, 3)
    assert verdict is not None and verdict.last_progress_ns == STALLED.entered_ns
    assert "no collective of its own was recorded" in verdict.message()
    inside = BeaconReading(2, 5 * S, 0, (GroupProgress("1", 4, 3, since_ns=2 * S),))
    verdict = hang_verdict(_silent("T", inside), STALLED, 3)
    assert verdict is not None and "it stopped inside all_reduce #4 of process group 1" in verdict.message()
    assert verdict.last_progress_ns == 2 * S


def test_a_worker_that_answers_is_judged_as_before_whatever_its_state() -> None:
    answered = ProbeAnswer(pid=2, asked_ns=20 * S, stacks="  File \"/app/train.py\", line 3 in step\n",
                           collectives=(CollectivePosition("1", 4, "gloo:all_reduce", 2 * S),))
    assert not answered.silent
    assert hang_verdict(answered, STALLED, 3) is None  # it entered #4: a victim


def test_a_stopped_worker_without_a_beacon_still_gets_an_answer_saying_it_is_stopped(tmp_path: Path) -> None:
    error_dir = tmp_path / "frozen"
    error_dir.mkdir()
    proc: subprocess.Popen[bytes] = start_probed_worker(error_dir, "sleep")
    try:
        os.kill(proc.pid, signal.SIGSTOP)
        _wait_stopped(proc.pid)
        answer = probe_workers([(proc.pid, str(error_dir / "error.json"))], wait_s=0.5)[proc.pid]
        assert answer.silent and answer.stopped and answer.beacon is None
    finally:
        proc.kill()
        proc.wait()
