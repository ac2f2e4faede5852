"""``rootcause_harness/faults.py``: a fault's spec as the pods get it, which worker it strikes and when,
what each kind does to that worker (in forked children for the kinds that end it), and what it leaves
for the simulator (the faulty pod, the fault's time, preemption and partition requests)."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rootcause_harness import faults
from rootcause_harness.faults import (
    AT_POD_START,
    BEFORE_INIT,
    CLOCK_OFFSET_VARIABLE,
    FAULT_TIME_FILE,
    FAULT_VARIABLE,
    FAULTY_POD_FILE,
    FIRST_ERROR_FILE,
    INJECTED_MESSAGE,
    LINK_CUT_PREFIX,
    NOT_STORE_HOST_POD,
    PARTITION_REQUEST_FILE,
    PREEMPT_REQUEST_FILE,
    SIM_DIR_VARIABLE,
    STORE_HOST_POD,
    Fault,
    FaultKind,
    PreemptRequest,
    ask_for_start_preemption,
    is_faulty_pod,
    maybe_inject,
    record_fault_time,
)


@pytest.fixture
def sim_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(SIM_DIR_VARIABLE, str(tmp_path))
    monkeypatch.delenv(CLOCK_OFFSET_VARIABLE, raising=False)
    monkeypatch.delenv(FAULT_VARIABLE, raising=False)
    return tmp_path


def _configure(monkeypatch: pytest.MonkeyPatch, fault: Fault) -> None:
    monkeypatch.setenv(FAULT_VARIABLE, fault.to_env())


def _in_child(step: int, pod: str, local_rank: int) -> int:
    """``maybe_inject`` in a forked child; its exit as ``Popen`` reports it (negative: the signal)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 0
        try:
            maybe_inject(step, pod, local_rank)
        except BaseException:
            code = 99
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_a_fault_round_trips_through_its_variable() -> None:
    fault = Fault(FaultKind.ORDERING, pod="p-1", local_rank=1, step=5, second_pod="p-0", second_delay_s=0.2,
                  clock_offset_s=-3.5, communication="send_recv", signals=2, sigterm_after_s=1.5, duration_s=4.0)
    decoded = Fault.from_env(fault.to_env())
    assert decoded == fault and isinstance(decoded.kind, FaultKind)
    assert json.loads(fault.to_env())["kind"] == "ordering"


@pytest.mark.parametrize("value", [None, ""])
def test_no_variable_is_no_fault(value: str | None) -> None:
    assert Fault.from_env(value) is None


def test_an_unknown_kind_or_field_is_refused() -> None:
    with pytest.raises(ValueError, match="'melt'"):
        Fault.from_env(json.dumps({"kind": "melt", "pod": "p"}))
    with pytest.raises(TypeError, match="colour"):
        Fault.from_env(json.dumps({"kind": "raise", "pod": "p", "colour": "red"}))


def test_the_fault_time_takes_a_skewed_pods_offset_back_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    offset = 3600 * 10**9
    monkeypatch.setenv(CLOCK_OFFSET_VARIABLE, str(offset))
    real_time_ns = time.time_ns
    monkeypatch.setattr(faults.time, "time_ns", lambda: real_time_ns() + offset)  # the skewed pod's clock
    before = real_time_ns()
    record_fault_time(tmp_path / FAULT_TIME_FILE)
    assert before <= int((tmp_path / FAULT_TIME_FILE).read_text()) <= real_time_ns()
    assert sorted(p.name for p in tmp_path.iterdir()) == [FAULT_TIME_FILE]  # the temporary file renamed


def test_a_pod_name_selects_that_pod_only(sim_dir: Path) -> None:
    assert is_faulty_pod("p-1", "p-1") and not is_faulty_pod("p-1", "p-0")
    assert not (sim_dir / FAULTY_POD_FILE).exists()


@pytest.fixture
def hosting_the_store(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process listens on the rendezvous endpoint's port: it is the store's host."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        monkeypatch.setenv("PET_RDZV_ENDPOINT", f"127.0.0.1:{listener.getsockname()[1]}")
        yield


@pytest.mark.usefixtures("hosting_the_store")
def test_the_store_host_selector_is_claimed_once_by_the_hosting_agent(sim_dir: Path) -> None:
    assert not is_faulty_pod(NOT_STORE_HOST_POD, "p-0", in_agent=True)
    assert is_faulty_pod(STORE_HOST_POD, "p-0", in_agent=True)
    assert (sim_dir / FAULTY_POD_FILE).read_text() == "p-0"
    assert not is_faulty_pod(STORE_HOST_POD, "p-0", in_agent=True)  # claimed already: exactly one pod


def test_a_store_selector_matches_nothing_without_a_rendezvous_endpoint(sim_dir: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PET_RDZV_ENDPOINT", raising=False)
    assert not is_faulty_pod(STORE_HOST_POD, "p-0") and not is_faulty_pod(NOT_STORE_HOST_POD, "p-0")
    assert not (sim_dir / FAULTY_POD_FILE).exists()


def test_a_preempt_request_round_trips_and_a_bad_one_reads_as_none(tmp_path: Path) -> None:
    assert PreemptRequest.read(tmp_path) is None
    request = PreemptRequest("p-1", signals=2, due_s=12.5, after_entrypoint_s=0.5)
    request.write(tmp_path)
    assert PreemptRequest.read(tmp_path) == request
    (tmp_path / PREEMPT_REQUEST_FILE).write_text("{not json")
    assert PreemptRequest.read(tmp_path) is None
    (tmp_path / PREEMPT_REQUEST_FILE).write_text('{"pod": "p", "unknown": 1}')
    assert PreemptRequest.read(tmp_path) is None


def test_a_stop_at_pod_start_is_asked_for_a_preempt_at_that_step_only(tmp_path: Path) -> None:
    ask_for_start_preemption(tmp_path, None)
    ask_for_start_preemption(tmp_path, Fault(FaultKind.PREEMPT, pod="p-1", step=3))
    ask_for_start_preemption(tmp_path, Fault(FaultKind.SIGKILL, pod="p-1", step=AT_POD_START))
    assert sorted(tmp_path.iterdir()) == []
    before = time.time()
    ask_for_start_preemption(tmp_path, Fault(FaultKind.PREEMPT, pod="p-1", step=AT_POD_START, signals=2,
                                             sigterm_after_s=4.0))
    request = PreemptRequest.read(tmp_path)
    assert request is not None and (request.pod, request.signals, request.after_entrypoint_s) == ("p-1", 2, 4.0)
    assert before <= request.due_s <= time.time()
    assert (tmp_path / FAULTY_POD_FILE).read_text() == "p-1"


def test_a_raise_strikes_its_worker_at_its_step_and_leaves_the_ground_truth(
    sim_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _configure(monkeypatch, Fault(FaultKind.RAISE, pod="p-1", local_rank=1, step=3))
    for step, pod, rank in ((2, "p-1", 1), (3, "p-0", 1), (3, "p-1", 0), (BEFORE_INIT, "p-1", 1)):
        maybe_inject(step, pod, rank)
    assert sorted(sim_dir.iterdir()) == []
    with pytest.raises(RuntimeError) as raised:
        maybe_inject(3, "p-1", 1)
    assert str(raised.value) == f"{INJECTED_MESSAGE} on p-1 local rank 1 at step 3"
    assert (sim_dir / FAULTY_POD_FILE).read_text() == "p-1"
    assert int((sim_dir / FAULT_TIME_FILE).read_text()) <= time.time_ns()


def test_no_configured_fault_injects_nothing(sim_dir: Path) -> None:
    maybe_inject(3, "p-1", 0)
    maybe_inject(BEFORE_INIT, "p-1", 0)
    assert sorted(sim_dir.iterdir()) == []


@pytest.mark.parametrize(
    ("kind", "exit_code"),
    [(FaultKind.SIGKILL, -signal.SIGKILL), (FaultKind.EXIT, 3), (FaultKind.RAISE, 99)],
)
def test_each_ending_kind_ends_its_worker_as_it_says(sim_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                                     kind: FaultKind, exit_code: int) -> None:
    _configure(monkeypatch, Fault(kind, pod="p-0", step=1))
    assert _in_child(1, "p-0", 0) == exit_code
    assert (sim_dir / FAULT_TIME_FILE).exists()


@pytest.mark.parametrize(("kind", "signal_number"), [(FaultKind.SIGSEGV, signal.SIGSEGV),
                                                      (FaultKind.SIGABRT, signal.SIGABRT)])
def test_a_segfault_and_an_abort_kill_the_worker_by_their_signal(sim_dir: Path, kind: FaultKind,
                                                                  signal_number: int) -> None:
    """In a fresh interpreter (a forked pytest would print its fault handler's dump); the segfault a
    real invalid read."""
    env = os.environ | {FAULT_VARIABLE: Fault(kind, pod="p-0", step=1).to_env(), SIM_DIR_VARIABLE: str(sim_dir)}
    code = "from rootcause_harness.faults import maybe_inject; maybe_inject(1, 'p-0', 0)"
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=60)
    assert run.returncode == -signal_number
    assert (sim_dir / FAULTY_POD_FILE).read_text() == "p-0"


def test_an_init_hang_is_due_before_init_whatever_its_step(sim_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _configure(monkeypatch, Fault(FaultKind.INIT_HANG, pod="p-0", step=3))
    maybe_inject(3, "p-0", 0)  # not due at its own step
    assert not (sim_dir / FAULT_TIME_FILE).exists()
    monkeypatch.setattr(faults.time, "sleep", lambda s: (_ for _ in ()).throw(InterruptedError(s)))
    with pytest.raises(InterruptedError):  # the hang's sleep, interrupted here
        maybe_inject(BEFORE_INIT, "p-0", 0)
    assert (sim_dir / FAULT_TIME_FILE).exists()


def test_a_preempt_asks_for_the_kubelets_stop_and_the_worker_goes_on(
    sim_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _configure(monkeypatch, Fault(FaultKind.PREEMPT, pod="p-1", step=2, signals=2))
    before = time.time()
    maybe_inject(2, "p-1", 0)
    request = PreemptRequest.read(sim_dir)
    assert request is not None and (request.pod, request.signals, request.after_entrypoint_s) == ("p-1", 2, None)
    assert before <= request.due_s <= time.time()


def test_a_late_sigterm_is_asked_for_on_top_of_another_kind(sim_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _configure(monkeypatch, Fault(FaultKind.RAISE, pod="p-1", step=2, sigterm_after_s=30.0))
    before = time.time()
    with pytest.raises(RuntimeError, match=INJECTED_MESSAGE):
        maybe_inject(2, "p-1", 0)
    request = PreemptRequest.read(sim_dir)
    assert request is not None and request.pod == "p-1" and before + 30.0 <= request.due_s <= time.time() + 30.0


@pytest.mark.parametrize(("kind", "request_text"), [(FaultKind.PARTITION, "p-1"),
                                                     (FaultKind.LINK_CUT, f"{LINK_CUT_PREFIX}p-1")])
def test_a_network_fault_asks_for_the_cut_and_the_worker_goes_on(
    sim_dir: Path, monkeypatch: pytest.MonkeyPatch, kind: FaultKind, request_text: str
) -> None:
    _configure(monkeypatch, Fault(kind, pod="p-1", step=2))
    maybe_inject(2, "p-1", 0)
    assert (sim_dir / PARTITION_REQUEST_FILE).read_text() == request_text


def test_ordering_fails_the_second_worker_independently_after_the_first_ones_record(
    sim_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    error_file = sim_dir / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(error_file))
    _configure(monkeypatch, Fault(FaultKind.ORDERING, pod="p-0", step=2, second_pod="p-1", second_delay_s=0.0))
    with pytest.raises(RuntimeError, match=f"{INJECTED_MESSAGE} on p-0"):
        maybe_inject(2, "p-0", 0)
    assert (sim_dir / FIRST_ERROR_FILE).read_text() == str(error_file)
    error_file.write_text("{}")  # the first worker's error recorded
    with pytest.raises(RuntimeError, match=r"^independent later failure on p-1 local rank 0 at step 2$"):
        maybe_inject(2, "p-1", 0)


def test_a_healthy_pause_trains_on(sim_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``WRITE`` and an ``IO_STALL`` of no duration: the worker returns and leaves no file behind."""
    for kind in (FaultKind.WRITE, FaultKind.IO_STALL):
        _configure(monkeypatch, dataclasses.replace(Fault(kind, pod="p-0", step=1), duration_s=0.0))
        maybe_inject(1, "p-0", 0)
    assert sorted(p.name for p in sim_dir.iterdir()) == [FAULT_TIME_FILE, FAULTY_POD_FILE]


def test_a_stalled_read_returns_once_the_storage_answers(tmp_path: Path) -> None:
    faults.stall_in_read(0.0, tmp_path / "stall.fifo")
    assert not (tmp_path / "stall.fifo").exists()


def _exit_with(code: int) -> None:
    os._exit(code)


def test_with_a_foreign_reaper_multiprocessing_reads_no_exit_code() -> None:
    """In a fresh interpreter: after the patch, a forked child's exit code is reaped by someone else."""
    code = """
import multiprocessing, os
from rootcause_harness.faults import reap_exited_workers_first
reap_exited_workers_first()
child = multiprocessing.get_context("fork").Process(target=os._exit, args=(5,))
child.start(); child.join(30)
print(child.exitcode)
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (run.returncode, run.stdout.strip()) == (0, "None"), run.stderr
    unpatched = multiprocessing.get_context("fork").Process(target=_exit_with, args=(5,))
    unpatched.start()
    unpatched.join(30)
    assert unpatched.exitcode == 5  # this process is untouched


def test_the_agent_monitor_patch_blocks_the_monitor(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

    monkeypatch.setattr(LocalElasticAgent, "_monitor_workers", LocalElasticAgent._monitor_workers)
    faults.hang_agent_monitor()
    assert LocalElasticAgent._monitor_workers is faults._block_forever


def test_only_a_preempt_in_the_rendezvous_arms_the_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.distributed.elastic.agent.server.api import SimpleElasticAgent

    original = SimpleElasticAgent._assign_worker_ranks
    monkeypatch.setattr(SimpleElasticAgent, "_assign_worker_ranks", original)
    monkeypatch.delenv(FAULT_VARIABLE, raising=False)
    faults.arm_agent_faults()
    _configure(monkeypatch, Fault(FaultKind.PREEMPT, pod="p-0", step=3))
    faults.arm_agent_faults()
    _configure(monkeypatch, Fault(FaultKind.RAISE, pod="p-0", step=faults.IN_RENDEZVOUS))
    faults.arm_agent_faults()
    assert SimpleElasticAgent._assign_worker_ranks is original
    _configure(monkeypatch, Fault(FaultKind.PREEMPT, pod="p-0", step=faults.IN_RENDEZVOUS))
    faults.arm_agent_faults()
    assert SimpleElasticAgent._assign_worker_ranks is not original
