"""The one diagnosis pipeline (``rootcause_engine/agent/diagnosis/pipeline.py``): a launch record and the peers'
word in, a :class:`Diagnosis` out; what it asks of the peers and when, and the report it assembles."""

from __future__ import annotations

import signal

import pytest

from rootcause_core.collectives import CollectivePosition
from rootcause_core.ordering import Role, TimeSource
from rootcause_core.testimony import LostPod, Member
from rootcause_engine.agent.death_watcher import ProcessExit
from rootcause_engine.agent.diagnosis.hang import HangVerdict
from rootcause_engine.agent.diagnosis.pipeline import (
    STALL_ANNOUNCEMENT_WAIT_S,
    Diagnosis,
    Trigger,
    agent_hung,
    diagnose,
    report_for,
)
from rootcause_engine.agent.diagnosis.selection import RetryRule
from rootcause_engine.agent.launch_ledger import LaunchedWorker
from rootcause_engine.agent.launch_record import LaunchRecord, WorkerRecord
from rootcause_engine.agent.worker_probe import ProbeAnswer
from rootcause_engine.worker.recorder import RecordedError
from tests.worker_failures import worker_failure

S = 1_000_000_000
T0 = 1_795_000_000 * S
CLOSED = "RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:9123"
GLOO_TIMEOUT = "RuntimeError: [gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 3000ms for recv operation"
SLEEPING = 'Current thread 0x1 (most recent call first):\n  File "/app/train.py", line 12 in step\n'
STALLED = CollectivePosition("0", 4, "gloo:all_reduce", T0 - S)
MEMBERS = (Member(0, "pod-0", 0, 2, True), Member(1, "pod-1", 2, 2))


class Failures:
    """This pod's word to the others, written down: what it announced, how long it waited, whether it was done."""

    def __init__(self, stalls: tuple[CollectivePosition, ...] = (), late: tuple[CollectivePosition, ...] = ()) -> None:
        self.announced: list[CollectivePosition | None] = []
        self.waits: list[float] = []
        self.done_calls = 0
        self._stalls, self._late = stalls, late

    def announce(self, stalled: CollectivePosition | None = None) -> None:
        self.announced.append(stalled)

    def stalls(self, wait_s: float = 0.0) -> tuple[CollectivePosition, ...]:
        self.waits.append(wait_s)
        return self._late if wait_s > 0 else self._stalls

    def done(self) -> None:
        self.done_calls += 1


class Lost:
    def __init__(self, pods: tuple[LostPod, ...]) -> None:
        self.pods, self.searches = pods, 0

    def search(self) -> tuple[LostPod, ...]:
        self.searches += 1
        return self.pods


class Peers:
    """The other pods as the pipeline asks them (``PeerWatch`` in a job)."""

    def __init__(self, *, lost: tuple[LostPod, ...] = (), note: str | None = None,
                 stalls: tuple[CollectivePosition, ...] = (), late: tuple[CollectivePosition, ...] = ()) -> None:
        self.failures = Failures(stalls, late)
        self.lost_pods = Lost(lost)
        self._note = note

    def watch_note(self) -> str | None:
        return self._note

    def members(self) -> tuple[Member, ...]:
        return MEMBERS


def _recorded(message: str, at: int, *, mro: tuple[str, ...] = ("ValueError",), recoverable: bool = False,
              collectives: tuple[CollectivePosition, ...] = ()) -> RecordedError:
    return RecordedError(message, f"Traceback (most recent call last):\n{message}\n", at, f"builtins.{mro[0]}", mro,
                         recoverable, None, None, None, "host-a", "pod-0", None, collectives)


def _worker(rank: int, *, recorded: RecordedError | None = None, exit_ns: int | None = None,
            signum: int | None = None, exitcode: int | None = 1, probe: ProbeAnswer | None = None) -> WorkerRecord:
    launched = LaunchedWorker(0, rank, rank, 0, 100 + rank, "")
    exit_ = None if exit_ns is None else ProcessExit(100 + rank, exit_ns, None if signum else exitcode, signum)
    return WorkerRecord(launched, exit_, recorded, probe=probe)


def _record(*workers: WorkerRecord, teardown_ns: int | None = None, done_ns: int | None = None) -> LaunchRecord:
    return LaunchRecord(0, workers, teardown_ns=teardown_ns, signals_ns=teardown_ns, teardown_done_ns=done_ns)


@pytest.fixture(autouse=True)
def _pod_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLYTE_INTERNAL_WORKER_NAME", "pod-0")


def test_a_report_needs_a_failure() -> None:
    with pytest.raises(ValueError, match="at least one failure"):
        report_for([])


def test_the_root_cause_line_stays_first_then_the_lost_pods_then_each_note_in_order() -> None:
    lost = LostPod(1, "pod-1", T0 - S)
    diagnosis = report_for([worker_failure(role=Role.VICTIM, message=CLOSED, timestamp_ns=T0)],
                           trigger=Trigger.POD_LOST, notes=["first note", "", "second note"], lost_pods=[lost],
                           members=MEMBERS, restarts=[(T0, "pod-1", "left", "rank 3 raised")])
    paragraphs = diagnosis.report.split("\n\n")
    assert paragraphs[0].startswith("[victim] rank 0 ")
    assert "pod-1 (group rank 1)" in paragraphs[-3] and "last seen alive" in paragraphs[-3]
    assert paragraphs[-2:] == ["first note", "second note"]  # the empty note adds nothing
    assert diagnosis.summary == paragraphs[0].splitlines()[0]
    assert (diagnosis.trigger, diagnosis.members, diagnosis.lost_pods) == (Trigger.POD_LOST, MEMBERS, (lost,))
    assert diagnosis.restarts == ((T0, "pod-1", "left", "rank 3 raised"),)


def test_whether_a_retry_helps_follows_the_front_end_s_rule() -> None:
    plain = [worker_failure(message="ValueError: x", timestamp_ns=T0)]
    assert report_for(plain).recoverable is False  # flytekit's: only a requested retry
    assert report_for(plain, retry_rule=RetryRule.UNLESS_REFUSED).recoverable is True  # Flyte 2's
    asked = [worker_failure(message="FlyteRecoverableException: spot", recoverable=True)]
    assert report_for(asked).recoverable is True


def test_a_diagnosis_names_its_root_cause_and_time_and_falls_back_to_its_trigger() -> None:
    cause, victim = worker_failure(0, timestamp_ns=T0, exitcode=1), worker_failure(1, role=Role.VICTIM)
    diagnosis = report_for([cause, victim])
    assert (diagnosis.root_cause, diagnosis.timestamp_ns, diagnosis.failures) == (cause, T0, (cause, victim))
    empty = Diagnosis(Trigger.STORE_LOST, (), "  \n", recoverable=True)
    assert (empty.root_cause, empty.timestamp_ns, empty.summary) == (None, None, Trigger.STORE_LOST.value)


def test_a_launch_in_which_no_worker_failed_has_no_diagnosis_and_still_tells_the_peers() -> None:
    peers = Peers()
    healthy = _record(_worker(0, exit_ns=T0, exitcode=0), _worker(1))
    assert diagnose(healthy, peers=peers) is None
    assert peers.failures.announced == [None] and peers.failures.waits == [0.0]
    assert diagnose(_record()) is None  # no attempt started at all


def test_a_failed_worker_is_diagnosed_with_the_agent_s_timeline_last() -> None:
    cause = _worker(1, recorded=_recorded("ValueError: bad batch", T0), exit_ns=T0 + S // 10)
    victim = _worker(0, exit_ns=T0 + 2 * S, signum=int(signal.SIGTERM))
    record = _record(cause, victim, teardown_ns=T0 + S // 4, done_ns=T0 + S)
    diagnosis = diagnose(record, notes=["a note of the road"], restarts=[(T0 - S, "pod-1", "joined", "")])
    assert diagnosis is not None and diagnosis.trigger == Trigger.WORKER_FAILED
    assert [(f.global_rank, f.role, f.time_source) for f in diagnosis.failures] == [
        (1, Role.CANDIDATE, TimeSource.RECORDED), (0, Role.VICTIM, TimeSource.OBSERVED)]
    assert diagnosis.summary.startswith("[root cause] rank 1 (local rank 1, group rank 0) on worker pod-0 ")
    assert diagnosis.summary.endswith(": ValueError: bad batch")
    paragraphs = diagnosis.report.split("\n\n")
    assert paragraphs[-2] == "a note of the road"
    assert paragraphs[-1].startswith("Agent timeline (after the root cause): noticed the failure +0.250 s, "
                                     "survivors ended +1.000 s, reported +")
    assert diagnosis.restarts == ((T0 - S, "pod-1", "joined", ""),)
    assert (diagnosis.members, diagnosis.lost_pods, diagnosis.recoverable) == ((), (), False)


def test_the_peers_hear_this_pod_s_stall_and_give_theirs_members_and_an_end() -> None:
    timed_out = _worker(0, recorded=_recorded(GLOO_TIMEOUT, T0, mro=("RuntimeError",), collectives=(STALLED,)),
                        exit_ns=T0 + S)
    peers = Peers(note="this pod's watch lost its peer link at 12:00")
    diagnosis = diagnose(_record(timed_out, teardown_ns=T0 + 2 * S), peers=peers)
    assert diagnosis is not None
    assert peers.failures.announced == [STALLED] and peers.failures.done_calls == 1
    assert diagnosis.members == MEMBERS
    assert "\n\nthis pod's watch lost its peer link at 12:00\n\nAgent timeline" in diagnosis.report


def test_lost_pods_are_searched_only_when_this_pod_saw_only_victims() -> None:
    lost = LostPod(1, "pod-1", T0 - 3 * S)
    cause = Peers(lost=(lost,))
    diagnosis = diagnose(_record(_worker(0, recorded=_recorded("ValueError: x", T0))), peers=cause)
    assert diagnosis is not None and diagnosis.lost_pods == () and cause.lost_pods.searches == 0
    victims = Peers(lost=(lost,))
    closed = _worker(0, recorded=_recorded(CLOSED, T0, mro=("RuntimeError",)))
    diagnosis = diagnose(_record(closed), peers=victims, trigger=Trigger.POD_LOST)
    assert diagnosis is not None and victims.lost_pods.searches == 1
    assert diagnosis.lost_pods == (lost,) and diagnosis.failures[0].role == Role.VICTIM
    assert "pod-1 (group rank 1)" in diagnosis.report and diagnosis.recoverable is True


def test_a_pod_of_victims_waits_for_a_late_stall_only_with_a_live_worker_outside_any_collective() -> None:
    closed = _worker(0, recorded=_recorded(CLOSED, T0, mro=("RuntimeError",)))
    # no live worker was probed: nothing to name, no reason to wait
    peers = Peers(late=(STALLED,))
    assert diagnose(_record(closed), peers=peers) is not None and peers.failures.waits == [0.0]
    # a live worker answered from its own code: the late word may name it
    sleeping = ProbeAnswer(pid=101, asked_ns=T0 + S, stacks=SLEEPING, collectives=())
    alive = _worker(1, exit_ns=T0 + 3 * S, signum=int(signal.SIGTERM), probe=sleeping)
    peers = Peers(late=(STALLED,))
    diagnosis = diagnose(_record(closed, alive, teardown_ns=T0 + 2 * S), peers=peers)
    assert peers.failures.waits == [0.0, STALL_ANNOUNCEMENT_WAIT_S]
    assert diagnosis is not None and (diagnosis.failures[0].global_rank, diagnosis.failures[0].role) == (
        1, Role.CANDIDATE)


def test_without_peers_nothing_is_announced_or_awaited() -> None:
    closed = _worker(0, recorded=_recorded(CLOSED, T0, mro=("RuntimeError",)))
    diagnosis = diagnose(_record(closed), trigger=Trigger.SOFT_RESTART)
    assert diagnosis is not None and diagnosis.trigger == Trigger.SOFT_RESTART
    assert (diagnosis.members, diagnosis.lost_pods) == ((), ())


def test_a_pod_failure_is_ranked_with_the_workers_by_the_same_rule() -> None:
    """The kubelet's SIGTERM reached the pod before any worker failed: the stop is the root cause."""
    stopped = worker_failure(0, global_rank=None, local_rank=None, group_rank=None, pid=None,
                             timestamp_ns=T0, message="the pod was stopped by its kubelet")
    termed = _worker(0, exit_ns=T0 + S, signum=int(signal.SIGTERM))
    diagnosis = diagnose(_record(termed, teardown_ns=T0 + S // 2), trigger=Trigger.STOPPED, pod_failures=[stopped])
    assert diagnosis is not None
    assert [f.message or f.signal_name for f in diagnosis.failures] == ["the pod was stopped by its kubelet", "SIGTERM"]
    assert diagnosis.failures[1].role == Role.VICTIM


def test_a_worker_the_hang_watch_named_becomes_the_hung_root_cause_with_its_stacks() -> None:
    closed = _worker(0, recorded=_recorded(CLOSED, T0, mro=("RuntimeError",)))
    probe = ProbeAnswer(pid=101, asked_ns=T0 + S, stacks=SLEEPING, collectives=())
    hung = _worker(1, exit_ns=T0 + 3 * S, signum=int(signal.SIGTERM), probe=probe)
    verdict = HangVerdict(stalled=STALLED, last=None, stacks="", last_progress_ns=T0 - 2 * S)
    diagnosis = diagnose(_record(closed, hung, teardown_ns=T0 + 2 * S), trigger=Trigger.HUNG_RANK, hung={101: verdict})
    assert diagnosis is not None
    root = diagnosis.root_cause
    assert root is not None and (root.global_rank, root.role, root.time_source, root.timestamp_ns) == (
        1, Role.CANDIDATE, TimeSource.LAST_PROGRESS, T0 - 2 * S)
    assert root.message.startswith("hung: ") and 'File "/app/train.py", line 12 in step' in diagnosis.report


def test_a_hung_agent_is_its_own_recoverable_root_cause_and_tells_the_peers() -> None:
    peers = Peers()
    diagnosis = agent_hung("the agent made no progress for 60 s after rank 1 failed", peers=peers,
                           restarts=[(T0, "pod-1", "left", "")])
    assert diagnosis.report == "[root cause] the agent made no progress for 60 s after rank 1 failed"
    assert (diagnosis.trigger, diagnosis.failures, diagnosis.recoverable) == (Trigger.AGENT_HUNG, (), True)
    assert diagnosis.summary == diagnosis.report and diagnosis.root_cause is None
    assert diagnosis.members == MEMBERS and diagnosis.restarts == ((T0, "pod-1", "left", ""),)
    assert peers.failures.announced == [None] and peers.failures.done_calls == 1
    assert agent_hung("hung").members == ()
