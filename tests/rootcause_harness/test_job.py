"""``rootcause_harness/job.py``: ``run_pods`` with small real pods (``sh -c``): the names and variables every
pod gets, the fault and clock of the faulty one, wrappers and callbacks, a stop at a pod's start, a lost pod
rescheduled, and what the run collects (exits, the operator's decision, the fault's time, the placement)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from rootcause_harness.faults import (
    AT_POD_START,
    CLOCK_OFFSET_VARIABLE,
    FAULT_TIME_FILE,
    FAULT_VARIABLE,
    FAULTY_POD_FILE,
    SIM_DIR_VARIABLE,
    SKEWED_CLOCK_DIR,
    Fault,
    FaultKind,
)
from rootcause_harness.job import JobShape, PodsRun, run_pods
from rootcause_harness.operator import SNAPSHOT_DIR, JobPhase, copy_local_prefix
from rootcause_harness.training_loop import RANKS_DIR

#: What a pod prints: the variables the simulator sets, one ``NAME=value`` a line.
SHOWN = ("FLYTE_INTERNAL_WORKER_NAME", "PET_NNODES", "PET_NPROC_PER_NODE", "PET_RDZV_ENDPOINT", SIM_DIR_VARIABLE,
         FAULT_VARIABLE, CLOCK_OFFSET_VARIABLE, "PYTHONPATH", "FLAVOUR", "OWN", "TORCHELASTIC_ERROR_FILE")
PRINT_ENV = "".join(f'echo "{name}=${{{name}-unset}}"; ' for name in SHOWN)


def _env_of(log: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in log.read_text().splitlines() if "=" in line)


def _run(tmp_path: Path, shape: JobShape, script: str) -> PodsRun:
    prefix = tmp_path / "prefix"
    prefix.mkdir(exist_ok=True)
    sim_dir = tmp_path / "sim"
    sim_dir.mkdir(exist_ok=True)
    return run_pods(shape, args=["sh", "-c", script], env={"FLAVOUR": "flytekit"}, sim_dir=sim_dir,
                    copy_prefix=copy_local_prefix(prefix))


def test_pod_names_are_the_prefix_and_index() -> None:
    assert JobShape(nnodes=3, nproc_per_node=1, pod_name_prefix="job").pod_names() == ["job-0", "job-1", "job-2"]


def test_every_pod_gets_the_jobs_variables_and_its_own_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", "/from/the/caller")  # never inherited
    monkeypatch.delenv("PYTHONPATH", raising=False)
    started: list[list[tuple[str, int]]] = []
    fault = Fault(FaultKind.RAISE, pod="train-worker-1", clock_offset_s=1.5)
    shape = JobShape(nnodes=2, nproc_per_node=4, fault=fault, timeout_s=60,
                     extra_pod_env={"train-worker-0": {"OWN": "zero"}}, on_pods_started=started.append)
    run = _run(tmp_path, shape, PRINT_ENV)
    assert not run.timed_out and [(p.name, p.returncode) for p in run.pods] == [("train-worker-0", 0),
                                                                                ("train-worker-1", 0)]
    zero, one = (_env_of(p.log_path) for p in run.pods)
    assert (zero["FLYTE_INTERNAL_WORKER_NAME"], one["FLYTE_INTERNAL_WORKER_NAME"]) == ("train-worker-0",
                                                                                       "train-worker-1")
    for env in (zero, one):
        assert (env["PET_NNODES"], env["PET_NPROC_PER_NODE"], env["FLAVOUR"]) == ("2", "4", "flytekit")
        assert env[SIM_DIR_VARIABLE] == str(tmp_path / "sim")
        assert Fault.from_env(env[FAULT_VARIABLE]) == fault
        assert env["TORCHELASTIC_ERROR_FILE"] == "unset"
    host, port = zero["PET_RDZV_ENDPOINT"].rsplit(":", 1)
    assert host == "127.0.0.1" and int(port) > 0 and one["PET_RDZV_ENDPOINT"] == zero["PET_RDZV_ENDPOINT"]
    assert (zero["OWN"], one["OWN"]) == ("zero", "unset")
    assert (zero[CLOCK_OFFSET_VARIABLE], one[CLOCK_OFFSET_VARIABLE]) == ("unset", "1500000000")
    assert one["PYTHONPATH"] == str(SKEWED_CLOCK_DIR)
    assert [[name for name, _ in names] for names in started] == [["train-worker-0", "train-worker-1"]]
    assert all(pid > 0 for _, pid in started[0])


def test_no_fault_means_no_fault_variable(tmp_path: Path) -> None:
    run = _run(tmp_path, JobShape(nnodes=1, nproc_per_node=1, timeout_s=60), PRINT_ENV)
    assert _env_of(run.pods[0].log_path)[FAULT_VARIABLE] == "unset"
    assert run.fault_ns is None and run.placement == {} and run.replaced == []


def test_a_pod_wrapper_wraps_each_pods_command_line(tmp_path: Path) -> None:
    def wrapper(name: str, args: list[str]) -> list[str]:
        return ["env", f"WRAPPED_AS={name}", *args]

    shape = JobShape(nnodes=2, nproc_per_node=1, timeout_s=60, pod_wrapper=wrapper)
    run = _run(tmp_path, shape, 'echo "WRAPPED_AS=$WRAPPED_AS"')
    assert [_env_of(p.log_path)["WRAPPED_AS"] for p in run.pods] == ["train-worker-0", "train-worker-1"]


def test_the_run_collects_the_decision_the_fault_time_and_the_placement(tmp_path: Path) -> None:
    script = (f'mkdir -p "${SIM_DIR_VARIABLE}/{RANKS_DIR}"; '
              f'printf "%s\\n0" "$FLYTE_INTERNAL_WORKER_NAME" > "${SIM_DIR_VARIABLE}/{RANKS_DIR}/0"; '
              f'echo 1234 > "${SIM_DIR_VARIABLE}/{FAULT_TIME_FILE}"; exit 3')
    run = _run(tmp_path, JobShape(nnodes=1, nproc_per_node=1, timeout_s=60), script)
    assert run.pods[0].returncode == 3 and run.fault_ns == 1234
    assert run.placement == {0: ("train-worker-0", 0)}
    assert (run.operator.phase, run.operator.pod, run.operator.code) == (JobPhase.FAILED, "train-worker-0", 3)
    assert set(run.fields()) == {"pods", "timed_out", "operator", "fault_ns", "placement", "replaced"}
    assert run.fields()["operator"] is run.operator


def test_a_succeeded_job_snapshots_the_prefix_in_the_sim_dir(tmp_path: Path) -> None:
    (tmp_path / "prefix").mkdir()
    (tmp_path / "prefix" / "outputs.pb").write_bytes(b"o")
    run = _run(tmp_path, JobShape(nnodes=1, nproc_per_node=1, timeout_s=60), "exit 0")
    assert run.operator.phase == JobPhase.SUCCEEDED
    assert run.operator.snapshot == tmp_path / "sim" / SNAPSHOT_DIR
    assert (run.operator.snapshot / "outputs.pb").read_bytes() == b"o"


def test_a_preempt_at_pod_start_stops_the_pod_once_its_entrypoint_handles_sigterm(tmp_path: Path) -> None:
    fault = Fault(FaultKind.PREEMPT, pod="train-worker-0", step=AT_POD_START, sigterm_after_s=0.0)
    shape = JobShape(nnodes=2, nproc_per_node=1, fault=fault, timeout_s=60)
    script = ('[ "$FLYTE_INTERNAL_WORKER_NAME" = train-worker-1 ] && exit 0; '
              "trap 'exit 5' TERM; while :; do sleep 0.02; done")
    run = _run(tmp_path, shape, script)
    assert not run.timed_out and [p.returncode for p in run.pods] == [5, 0]
    assert (tmp_path / "sim" / FAULTY_POD_FILE).read_text() == "train-worker-0"
    assert run.fault_ns is not None


def test_a_lost_pod_is_rescheduled_under_its_name(tmp_path: Path) -> None:
    script = ('marker="$ROOTCAUSE_SIM_DIR/started-$FLYTE_INTERNAL_WORKER_NAME"; '
              '[ -e "$marker" ] && exit 0; touch "$marker"; '
              '[ "$FLYTE_INTERNAL_WORKER_NAME" = train-worker-1 ] && kill -KILL $$; exit 0')
    shape = JobShape(nnodes=2, nproc_per_node=1, timeout_s=60, reschedule_lost_after_s=0)
    run = _run(tmp_path, shape, script)
    assert [(p.name, p.returncode, p.log_path.name) for p in run.pods] == [
        ("train-worker-0", 0, "train-worker-0.log"), ("train-worker-1", 0, "train-worker-1.rescheduled.log")]
    assert [(p.name, p.returncode) for p in run.replaced] == [("train-worker-1", -signal.SIGKILL)]


def test_a_job_past_its_timeout_is_killed_whole(tmp_path: Path) -> None:
    run = _run(tmp_path, JobShape(nnodes=1, nproc_per_node=1, timeout_s=0), "exec sleep 600")
    assert run.timed_out and run.pods[0].returncode is None
    assert run.operator.phase == JobPhase.UNDECIDED
