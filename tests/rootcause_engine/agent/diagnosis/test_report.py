"""The root-cause message (``rootcause_engine/agent/diagnosis/report.py``): its first line, the root cause's
traceback, the other failures, the agent's timeline line, and the bounds every text in it keeps."""

from __future__ import annotations

import signal

import pytest

from rootcause_core.ordering import Role, TimeSource
from rootcause_core.roles import role_from_marker
from rootcause_core.safe_text import CUT_MARKER, MAX_REPORT_BYTES, MAX_REPORT_TRACEBACK_BYTES
from rootcause_engine.agent.death_watcher import ProcessExit
from rootcause_engine.agent.diagnosis.failures import WorkerFailure
from rootcause_engine.agent.diagnosis.report import (
    describe_ending,
    describe_worker,
    format_agent_timeline,
    format_root_cause_message,
    format_time,
    summary_line,
)
from rootcause_engine.agent.diagnosis.selection import rank_failures
from rootcause_engine.agent.launch_ledger import LaunchedWorker
from rootcause_engine.agent.launch_record import WorkerRecord
from tests.worker_failures import worker_failure

S = 1_000_000_000
T0 = 1_795_000_000 * S


def launched(rank: int) -> LaunchedWorker:
    return LaunchedWorker(attempt=0, local_rank=rank, global_rank=rank, group_rank=0, pid=100 + rank,
                          error_file=f"/tmp/attempt_0/{rank}/error.json")


def rank(evidence: list[WorkerRecord], teardown_ns: int | None = None) -> list[WorkerFailure]:
    return rank_failures(evidence, signals_ns=teardown_ns, worker="pod-0", host="host-a")


def test_report_names_root_cause_then_victims() -> None:
    teardown = T0 + S
    failures = rank([
        WorkerRecord(launched(1), ProcessExit(101, T0 + 123_456_789, None, int(signal.SIGKILL)), None),
        WorkerRecord(launched(0), ProcessExit(100, teardown + 1, None, int(signal.SIGTERM)), None),
    ], teardown)
    text = format_root_cause_message(failures)
    lines = text.splitlines()
    assert lines[0] == (
        f"[root cause] rank 1 (local rank 1, group rank 0) on worker pod-0 (host host-a, pid 101, SIGKILL) "
        f"failed at {format_time(T0 + 123_456_789)} (observed): killed by SIGKILL (no error file: likely killed "
        "by the OOM killer or the node; check the pod's memory limit and events)"
    )
    assert lines[-2] == "Other failures (1):"
    assert lines[-1].startswith("  - victim: rank 0 (local rank 0, group rank 0) on worker pod-0")
    assert " +0.877 s: killed by SIGTERM (the agent's teardown" in lines[-1]


def test_format_time_keeps_nanoseconds() -> None:
    assert format_time(1_700_000_000_000_000_001) == "2023-11-14T22:13:20.000000001Z"
    assert format_time(None) == "unknown time"


def test_there_is_no_report_without_a_failure() -> None:
    with pytest.raises(ValueError, match="no failures to report"):
        format_root_cause_message([])


def test_the_first_line_carries_the_role_marker_readers_parse() -> None:
    for role in (Role.CANDIDATE, Role.VICTIM, Role.LOST_POD):
        report = format_root_cause_message([worker_failure(role=role, exitcode=1)])
        assert role_from_marker(report.splitlines()[0]) == role


def test_a_pod_that_saw_only_victims_says_to_look_at_the_other_workers() -> None:
    report = format_root_cause_message([worker_failure(role=Role.VICTIM, message="RuntimeError: Connection reset")])
    lines = report.splitlines()
    assert lines[0].startswith("[victim] rank 0 ")
    assert lines[1].startswith("Only victims failed in this pod: a peer (another pod or node) failed first")
    assert "Only victims" not in format_root_cause_message([worker_failure(exitcode=1)])


def test_the_root_cause_s_traceback_follows_indented_and_is_left_out_when_blank() -> None:
    failure = worker_failure(message="ValueError: bad batch",
                             traceback='Traceback (most recent call last):\n  File "train.py"\nValueError: bad batch\n')
    lines = format_root_cause_message([failure]).splitlines()
    assert lines[1:] == ["", "Traceback of the root cause:", "  Traceback (most recent call last):",
                         '    File "train.py"', "  ValueError: bad batch"]
    assert format_root_cause_message([worker_failure(exitcode=1, traceback=" \n ")]).count("\n") == 0


def test_a_huge_traceback_keeps_its_head_and_innermost_frames_within_its_budget() -> None:
    frames = "".join(f'  File "layer_{n}.py", line {n}\n' for n in range(20_000))
    failure = worker_failure(message="ValueError: deep", traceback=f"Traceback\n{frames}ValueError: innermost\n")
    report = format_root_cause_message([failure, worker_failure(1, role=Role.VICTIM, exitcode=1)])
    traceback = report.split("Traceback of the root cause:\n", 1)[1].split("\n\nOther failures", 1)[0]
    assert len(traceback.encode()) <= MAX_REPORT_TRACEBACK_BYTES + 2 * len(traceback.splitlines())  # + the indent
    assert CUT_MARKER.strip() in traceback
    assert traceback.startswith("  Traceback") and traceback.endswith("  ValueError: innermost")
    assert report.endswith("exited with code 1")


def test_a_thousand_other_failures_still_fit_propeller_s_message_limit() -> None:
    root = worker_failure(message="ValueError: " + "x" * 5000)
    others = [worker_failure(rank, role=Role.VICTIM, message="RuntimeError: Connection closed by peer " + "y" * 300)
              for rank in range(1, 1001)]
    report = format_root_cause_message([root, *others])
    assert len(report.encode()) <= MAX_REPORT_BYTES
    assert report.startswith("[root cause] rank 0 ") and "Other failures (1000):" in report


def test_other_failures_show_their_offset_only_when_both_times_are_known() -> None:
    root = worker_failure(0, timestamp_ns=T0, exitcode=1)
    later = worker_failure(1, timestamp_ns=T0 + 1_500_000_000, role=Role.VICTIM, exitcode=1)
    earlier = worker_failure(2, timestamp_ns=T0 - 250_000_000, role=Role.CANDIDATE, exitcode=2)
    untimed = worker_failure(3, timestamp_ns=None, role=Role.VICTIM, exitcode=3)
    lines = format_root_cause_message([root, later, earlier, untimed]).splitlines()
    assert lines[-4] == "Other failures (3):"
    assert lines[-3].endswith("pid 101, exit code 1) +1.500 s: exited with code 1")
    assert lines[-2].startswith("  - candidate: rank 2 ") and lines[-2].endswith(" -0.250 s: exited with code 2")
    assert lines[-1].endswith("pid 103, exit code 3): exited with code 3")


def test_a_worker_with_nothing_known_is_described_with_question_marks() -> None:
    failure = worker_failure(global_rank=None, local_rank=None, group_rank=None, worker="", host="", pid=None)
    assert describe_worker(failure) == "rank ? (local rank ?, group rank ?) on worker ? (pid ?)"
    assert describe_ending(failure) == "failed (no exit status or error file)"


def test_the_host_is_named_only_when_it_differs_from_the_worker_and_names_cannot_break_the_line() -> None:
    same = worker_failure(5, worker="pod-2", host="pod-2", exitcode=4)
    assert describe_worker(same) == "rank 5 (local rank 1, group rank 2) on worker pod-2 (pid 105, exit code 4)"
    forged = worker_failure(worker="pod\n[root cause] fake", host="h\tost", signal_number=int(signal.SIGKILL))
    described = describe_worker(forged)
    assert "\n" not in described and "\t" not in described
    assert described == "rank 0 (local rank 0, group rank 0) on worker pod\\x0a[root cause] fake (host h\\x09ost, " \
                        "pid 100, SIGKILL)"


def test_a_signal_takes_precedence_over_an_exit_code_in_the_worker_s_status() -> None:
    failure = worker_failure(exitcode=1, signal_number=int(signal.SIGSEGV))
    assert describe_worker(failure).endswith("(host h, pid 100, SIGSEGV)")
    assert describe_ending(failure) == "killed by SIGSEGV (segmentation fault in native code (CUDA, a C extension); " \
                                       "check the worker's stderr)"


def test_an_exception_s_first_line_is_the_ending_whatever_signal_followed() -> None:
    failure = worker_failure(message="\n\n  ValueError: bad batch\nsecond line", signal_number=int(signal.SIGKILL))
    assert describe_ending(failure) == "ValueError: bad batch"


@pytest.mark.parametrize(
    ("fields", "ending"),
    [
        ({"signal_number": int(signal.SIGTERM)}, "killed by SIGTERM"),
        ({"signal_number": int(signal.SIGUSR1)}, "killed by SIGUSR1"),
        ({"signal_number": int(signal.SIGTERM), "role": Role.VICTIM},
         "killed by SIGTERM (the agent's teardown after another worker failed)"),
        ({"signal_number": int(signal.SIGSEGV), "role": Role.VICTIM},
         "killed by SIGSEGV (segmentation fault in native code (CUDA, a C extension); check the worker's stderr)"),
        ({"exitcode": 143}, "exited with code 143"),  # 128 + SIGTERM: no hint for it
        ({"exitcode": 128}, "exited with code 128"),
        ({"exitcode": 128 + 65}, "exited with code 193"),
        ({"exitcode": 128 + int(signal.SIGBUS)}, "exited with code 135 (128 + SIGBUS: a process it ran was killed by "
                                                 "SIGBUS; bus error: often /dev/shm too small for data loader "
                                                 "workers; raise shared memory)"),
    ],
)
def test_how_a_worker_ended_and_what_it_likely_means(fields: dict[str, object], ending: str) -> None:
    assert describe_ending(worker_failure(**fields)) == ending  # type: ignore[arg-type]


def test_the_summary_line_says_who_when_how_the_time_was_known_and_what() -> None:
    failure = worker_failure(2, timestamp_ns=1_700_000_000_000_000_001, time_source=TimeSource.RECORDED,
                             message="KeyError: 'label'")
    assert summary_line(failure) == (
        "[root cause] rank 2 (local rank 0, group rank 1) on worker pod-1 (host h, pid 102) failed at "
        "2023-11-14T22:13:20.000000001Z (recorded): KeyError: 'label'"
    )
    assert "failed at unknown time (unknown)" in summary_line(worker_failure(timestamp_ns=None,
                                                                             time_source=TimeSource.UNKNOWN))


def test_the_agent_timeline_gives_offsets_from_the_root_cause_and_skips_unknown_steps() -> None:
    assert format_agent_timeline(T0, T0 + 250_000_000, T0 + 5 * S, T0 + 6 * S) == (
        "Agent timeline (after the root cause): noticed the failure +0.250 s, survivors ended +5.000 s, "
        "reported +6.000 s"
    )
    assert format_agent_timeline(T0, None, None, T0 + S) == "Agent timeline (after the root cause): reported +1.000 s"
    # a pod that began its teardown before the root cause's time (another pod's failure told it first)
    assert format_agent_timeline(T0, T0 - S, None, T0 + S).endswith("noticed the failure -1.000 s, reported +1.000 s")


def test_the_agent_timeline_without_a_root_cause_time_says_so() -> None:
    assert format_agent_timeline(None, T0, T0, T0) == "Agent timeline: unknown (the root cause has no time)"
