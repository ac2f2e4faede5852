"""``rootcause_harness/pods.py`` with small real pods (``sh -c`` sessions): the environment a pod gets, its
exit as reported (code, time, log), the operator told of every exit a kubelet would report, frozen and
lost pods, preemption and deletion by signals, rescheduling, timeouts, and the ground truth workers leave."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from rootcause_harness.faults import (
    CLOCK_OFFSET_VARIABLE,
    FAULT_TIME_FILE,
    FAULTY_POD_FILE,
    FROZEN_POD_FILE,
    LINK_CUT_PREFIX,
    LOST_NODE_FILE,
    PARTITION_REQUEST_FILE,
    PARTITIONED_POD_FILE,
    PREEMPT_REQUEST_FILE,
    SKEWED_CLOCK_DIR,
    Fault,
    FaultKind,
    PreemptRequest,
)
from rootcause_harness.operator import JobPhase, Operator, copy_local_prefix
from rootcause_harness.pods import (
    POD_CONTROLLED,
    FaultGroundTruth,
    Pod,
    PodResult,
    PodWatch,
    Rescheduler,
    _handles_sigterm,
    base_env,
    clock_env,
    injected_rank,
    injected_worker,
    kill_group,
    read_placement,
    start_pod,
    wait_for_pods,
)
from rootcause_harness.training_loop import RANKS_DIR

#: A pod that runs until it is signalled.
RUNS_ON = "exec sleep 600"


def _pod(tmp_path: Path, name: str, script: str) -> Pod:
    return start_pod(["sh", "-c", script], dict(os.environ), name, tmp_path / f"{name}.log")


def _operator(tmp_path: Path) -> Operator:
    (tmp_path / "prefix").mkdir(exist_ok=True)
    return Operator(copy_local_prefix(tmp_path / "prefix"), tmp_path / "snapshot")


def test_a_pod_gets_this_environment_without_what_the_simulator_sets(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in POD_CONTROLLED:
        monkeypatch.setenv(variable, "from-outside")
    monkeypatch.setenv("PYTHONUNBUFFERED", "0")
    monkeypatch.setenv("MY_OWN", "kept")
    monkeypatch.setenv("PYTHONWARNINGS", "error")
    env = base_env()
    assert not set(POD_CONTROLLED) & set(env)
    assert {"FLYTE_INTERNAL_WORKER_NAME", "PET_RDZV_ENDPOINT", "TORCHELASTIC_ERROR_FILE"} <= set(POD_CONTROLLED)
    assert (env["MY_OWN"], env["PYTHONUNBUFFERED"], env["PYTHONWARNINGS"]) == ("kept", "0", "ignore")


def test_only_the_faulty_pod_of_a_clock_offset_gets_the_skewed_clock() -> None:
    fault = Fault(FaultKind.RAISE, pod="p-1", clock_offset_s=2.5)
    assert clock_env(fault, "p-1", {"PYTHONPATH": "/a"}) == {
        CLOCK_OFFSET_VARIABLE: str(2_500_000_000), "PYTHONPATH": f"{SKEWED_CLOCK_DIR}{os.pathsep}/a"}
    assert clock_env(fault, "p-1", {}) == {CLOCK_OFFSET_VARIABLE: "2500000000", "PYTHONPATH": str(SKEWED_CLOCK_DIR)}
    assert clock_env(fault, "p-0", {}) == {}
    assert clock_env(Fault(FaultKind.RAISE, pod="p-1"), "p-1", {}) == {}
    assert clock_env(None, "p-1", {}) == {}


def test_a_pod_that_exits_1_is_reported_with_its_code_time_and_log_and_fails_the_job(tmp_path: Path) -> None:
    operator = _operator(tmp_path)
    before = time.time_ns()
    pods = [_pod(tmp_path, "p-0", "echo training; echo broke >&2; exit 1")]
    results, timed_out = wait_for_pods(pods, 60, PodWatch(tmp_path, operator))
    [result] = results
    assert not timed_out
    assert (result.name, result.returncode, result.log_path) == ("p-0", 1, tmp_path / "p-0.log")
    assert before <= result.exited_ns <= time.time_ns()
    assert result.log_path.read_text() == "training\nbroke\n"
    decision = operator.decision
    assert (decision.phase, decision.pod, decision.code, decision.snapshot) == (JobPhase.FAILED, "p-0", 1, None)


def test_a_pod_killed_by_a_signal_is_reported_as_kubernetes_reports_it(tmp_path: Path) -> None:
    operator = _operator(tmp_path)
    results, _ = wait_for_pods([_pod(tmp_path, "p-0", "kill -KILL $$")], 60, PodWatch(tmp_path, operator))
    assert results[0].returncode == -signal.SIGKILL
    assert (operator.decision.phase, operator.decision.code) == (JobPhase.FAILED, 128 + signal.SIGKILL)


def test_a_lost_nodes_exit_is_not_reported_and_the_next_one_decides(tmp_path: Path) -> None:
    operator = _operator(tmp_path)
    (tmp_path / LOST_NODE_FILE).write_text("p-0")
    (tmp_path / "prefix" / "outputs.pb").write_bytes(b"out")
    # p-1 exits 0 only once p-0 is gone and reaped (its pid no longer exists)
    lost = _pod(tmp_path, "p-0", "kill -KILL $$")
    wait_for_lost = f"while kill -0 {lost[1].pid} 2>/dev/null; do sleep 0.01; done; exit 0"
    pods = [lost, _pod(tmp_path, "p-1", wait_for_lost)]
    results, timed_out = wait_for_pods(pods, 60, PodWatch(tmp_path, operator))
    assert not timed_out and [r.returncode for r in results] == [-signal.SIGKILL, 0]
    decision = operator.decision
    assert (decision.phase, decision.pod, decision.code) == (JobPhase.SUCCEEDED, "p-1", 0)
    assert decision.snapshot is not None and (decision.snapshot / "outputs.pb").read_bytes() == b"out"


def test_a_frozen_pod_is_not_waited_for_and_is_killed_once_the_others_are_done(tmp_path: Path) -> None:
    (tmp_path / FROZEN_POD_FILE).write_text("p-1")
    frozen = _pod(tmp_path, "p-1", RUNS_ON)
    watch = PodWatch(tmp_path, _operator(tmp_path))
    results, timed_out = wait_for_pods([_pod(tmp_path, "p-0", "exit 0"), frozen], 60, watch)
    assert not timed_out
    assert [(r.name, r.returncode) for r in results] == [("p-0", 0), ("p-1", None)]
    assert frozen[1].poll() == -signal.SIGKILL
    assert watch.silent("p-1") and not watch.silent("p-0")


def test_a_timeout_kills_every_pod_and_reports_no_exit(tmp_path: Path) -> None:
    pod = _pod(tmp_path, "p-0", RUNS_ON)
    results, timed_out = wait_for_pods([pod], 0, PodWatch(tmp_path))
    assert timed_out and results[0].returncode is None
    assert pod[1].poll() == -signal.SIGKILL


def test_killing_a_pod_kills_every_process_of_its_session(tmp_path: Path) -> None:
    pod = _pod(tmp_path, "p-0", f"sleep 600 & echo $! > {tmp_path}/child; wait")
    while not (tmp_path / "child").exists() or not (tmp_path / "child").read_text().strip():
        time.sleep(0.01)
    child = int((tmp_path / "child").read_text())
    assert os.getsid(child) == pod[1].pid  # the pod's own session
    kill_group(pod[1])
    assert pod[1].wait(timeout=30) == -signal.SIGKILL
    while _state(child) not in (None, "Z"):  # gone, or dead and not yet reaped by its new parent
        time.sleep(0.01)
    kill_group(pod[1])  # a pod already gone: nothing raised


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


def test_a_due_preemption_sigterms_the_pod_and_records_the_fault_time(tmp_path: Path) -> None:
    pod = _pod(tmp_path, "p-0", RUNS_ON)
    other = _pod(tmp_path, "p-1", RUNS_ON)
    PreemptRequest("p-0", signals=1, due_s=time.time()).write(tmp_path)
    watch = PodWatch(tmp_path, grace_s=600)
    watch.preempt_due([pod, other])
    assert pod[1].wait(timeout=30) == -signal.SIGTERM
    assert not (tmp_path / PREEMPT_REQUEST_FILE).exists()
    assert int((tmp_path / FAULT_TIME_FILE).read_text()) <= time.time_ns()
    assert other[1].poll() is None
    kill_group(other[1])
    other[1].wait(timeout=30)


def test_a_preemption_not_yet_due_waits(tmp_path: Path) -> None:
    pod = _pod(tmp_path, "p-0", RUNS_ON)
    PreemptRequest("p-0", due_s=time.time() + 3600).write(tmp_path)
    PodWatch(tmp_path).preempt_due([pod])
    assert pod[1].poll() is None and (tmp_path / PREEMPT_REQUEST_FILE).exists()
    kill_group(pod[1])
    pod[1].wait(timeout=30)


def test_a_pod_that_ignores_sigterm_is_killed_when_its_grace_runs_out(tmp_path: Path) -> None:
    pod = _pod(tmp_path, "p-0", f"trap '' TERM; touch {tmp_path}/ready; while :; do sleep 0.05; done")
    while not (tmp_path / "ready").exists():
        time.sleep(0.01)
    PreemptRequest("p-0", signals=2, due_s=time.time()).write(tmp_path)
    PodWatch(tmp_path, grace_s=0).preempt_due([pod])
    assert pod[1].wait(timeout=30) == -signal.SIGKILL


def test_pods_still_running_after_the_decision_are_deleted_with_sigterm(tmp_path: Path) -> None:
    operator = _operator(tmp_path)
    watch = PodWatch(tmp_path, operator, delete_after_decision_s=0)
    results, timed_out = wait_for_pods([_pod(tmp_path, "p-0", "exit 1"), _pod(tmp_path, "p-1", RUNS_ON)], 60, watch)
    assert not timed_out and [r.returncode for r in results] == [1, -signal.SIGTERM]
    assert operator.decision.pod == "p-0"


class _RecordingNetwork:
    """Stands in for a ``PodNetwork`` (whose cuts need root): records what the watch cut."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def cut(self, name: str) -> None:
        self.calls.append(("cut", name))

    def cut_links(self, name: str) -> None:
        self.calls.append(("cut_links", name))


def test_a_partition_request_cuts_the_pod_once_and_silences_it(tmp_path: Path) -> None:
    network = _RecordingNetwork()
    watch = PodWatch(tmp_path, network=network)  # type: ignore[arg-type]
    (tmp_path / PARTITION_REQUEST_FILE).write_text("p-1")
    watch.preempt_due([])
    watch.preempt_due([])
    assert network.calls == [("cut", "p-1")]
    assert watch.silent("p-1") and (tmp_path / PARTITIONED_POD_FILE).read_text() == "p-1"


def test_a_link_cut_cuts_the_links_and_leaves_the_pod_reported(tmp_path: Path) -> None:
    network = _RecordingNetwork()
    watch = PodWatch(tmp_path, network=network)  # type: ignore[arg-type]
    (tmp_path / PARTITION_REQUEST_FILE).write_text(f"{LINK_CUT_PREFIX}p-0")
    watch.preempt_due([])
    assert network.calls == [("cut_links", "p-0")] and not watch.silent("p-0")


def test_a_partition_without_a_pod_network_is_an_error(tmp_path: Path) -> None:
    (tmp_path / PARTITION_REQUEST_FILE).write_text("p-1")
    with pytest.raises(RuntimeError, match="needs the job on a PodNetwork"):
        PodWatch(tmp_path).preempt_due([])


def _starter(tmp_path: Path) -> tuple[list[Path], object]:
    """A pod starter whose first start of a pod is killed by SIGKILL (its node lost) and whose restart exits 0."""
    started: list[Path] = []

    def start(name: str, log_path: Path) -> Pod:
        started.append(log_path)
        script = "exit 0" if log_path.name.endswith(".rescheduled.log") else "kill -KILL $$"
        return start_pod(["sh", "-c", script], dict(os.environ), name, log_path)

    return started, start


def test_a_pod_lost_to_a_signal_is_rescheduled_once_under_its_name(tmp_path: Path) -> None:
    started, start = _starter(tmp_path)
    rescheduler = Rescheduler(start, after_s=0)  # type: ignore[arg-type]
    rescheduler.lost(PodResult("p-0", 1, 0, tmp_path / "p-0.log"))  # an exit, not a loss
    rescheduler.lost(PodResult("p-1", None, 0, tmp_path / "p-1.log"))  # never exited
    assert not rescheduler.pending and rescheduler.due() == []
    lost = PodResult("p-0", -signal.SIGKILL, 0, tmp_path / "p-0.log")
    rescheduler.lost(lost)
    assert rescheduler.pending and rescheduler.replaced == [lost]
    [(name, proc, log_path)] = rescheduler.due()
    assert (name, log_path) == ("p-0", tmp_path / "p-0.rescheduled.log") and not rescheduler.pending
    assert proc.wait(timeout=30) == 0
    rescheduler.lost(PodResult("p-0", -signal.SIGKILL, 0, log_path))  # lost again: not rescheduled again
    assert not rescheduler.pending and started == [log_path]


def test_waiting_follows_a_rescheduled_pod_to_its_own_end(tmp_path: Path) -> None:
    started, start = _starter(tmp_path)
    rescheduler = Rescheduler(start, after_s=0)  # type: ignore[arg-type]
    pods = [start("p-0", tmp_path / "p-0.log")]
    results, timed_out = wait_for_pods(pods, 60, PodWatch(tmp_path), rescheduler)
    assert not timed_out
    assert [(r.name, r.returncode, r.log_path.name) for r in results] == [("p-0", 0, "p-0.rescheduled.log")]
    assert [(r.returncode, r.log_path.name) for r in rescheduler.replaced] == [(-signal.SIGKILL, "p-0.log")]
    assert [p.name for p in started] == ["p-0.log", "p-0.rescheduled.log"]


def test_the_placement_and_the_injected_worker_come_from_what_the_workers_left(tmp_path: Path) -> None:
    assert read_placement(tmp_path) == {}
    (tmp_path / RANKS_DIR).mkdir()
    for rank, (pod, local) in {0: ("p-0", 0), 1: ("p-0", 1), 2: ("p-1", 0), 3: ("p-1", 1)}.items():
        (tmp_path / RANKS_DIR / str(rank)).write_text(f"{pod}\n{local}")
    placement = read_placement(tmp_path)
    assert placement == {0: ("p-0", 0), 1: ("p-0", 1), 2: ("p-1", 0), 3: ("p-1", 1)}
    fault = Fault(FaultKind.RAISE, pod="@store-host", local_rank=1)
    assert injected_worker(tmp_path, None) is None and injected_rank(tmp_path, None, placement) is None
    assert injected_worker(tmp_path, fault) == "@store-host" and injected_rank(tmp_path, fault, placement) is None
    (tmp_path / FAULTY_POD_FILE).write_text("p-1")  # the selector as the faulty worker resolved it
    assert injected_worker(tmp_path, fault) == "p-1" and injected_rank(tmp_path, fault, placement) == 3


class _Result(FaultGroundTruth):
    def __init__(self, sim_dir: Path, fault: Fault | None, pods: list[PodResult], fault_ns: int | None) -> None:
        self.spec = type("Spec", (), {"fault": fault})()
        self.sim_dir, self.pods, self.fault_ns = sim_dir, pods, fault_ns
        self.placement = {5: ("p-0", 0)}


def test_a_results_ground_truth_and_time_from_fault_to_the_last_exit(tmp_path: Path) -> None:
    pods = [PodResult("p-0", 1, 4_000_000_000, tmp_path), PodResult("p-1", 0, 6_500_000_000, tmp_path)]
    result = _Result(tmp_path, Fault(FaultKind.RAISE, pod="p-0"), pods, 1_000_000_000)
    assert (result.injected_worker, result.injected_rank, result.fault_to_exit_s) == ("p-0", 5, 5.5)
    assert _Result(tmp_path, None, pods, None).fault_to_exit_s is None
    assert _Result(tmp_path, None, [], 1).fault_to_exit_s is None


@pytest.mark.usefixtures("signal_handlers_restored")
def test_whether_a_process_catches_sigterm_is_read_from_proc() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    assert not _handles_sigterm(os.getpid())
    signal.signal(signal.SIGTERM, lambda *_: None)
    assert _handles_sigterm(os.getpid())
    assert not _handles_sigterm(2**22 + 1)  # no such process (above the kernel's pid_max)
