"""End to end: a simulated 2-pod x 2-worker PyTorchJob, a fault in one worker, the backend's verdict.

Each pod is the patched entrypoint started from the serialized task's container args, as the
training operator would start it; the pods share one output prefix; ``backend_reader`` then reads
every pod's error file as the propeller side would. The verdict must name the injected worker (pod)
and the global rank the rendezvous gave it; and upstream Flyte's own rule (strictly earliest
timestamp, ``backend_reader.upstream_rule``), which is what the Flyte console shows, applied to the
same files as they lie, must name the same pod.

Each fault kind runs once, on the smallest job that shows it (these are the suite's most expensive
tests: every pod is an interpreter with torch and flytekit): 2 pods x 1 worker where the fault is
between pods, 2 x 2 where a victim shares the faulty worker's pod (an abort, a segfault, a hang
beside a peer), 3 x 1 for a third pod. The abort runs the product's own task, whose workers are
spawned as kfpytorch's are by default; the other kinds run the same training loop with forked
workers (``tests/elastic_tasks/forked_training.py``: a spawned worker is one more torch and flytekit
import). A SIGKILL at 2x2, spawned, is the README demo's own fault, run end to end by
``test_demo.py`` with both readers; ``benchmarks/e2e.py`` runs every kind spawned at 2x2 and 4x2,
repeatedly, and scores both readers.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from flytekit.core.base_task import PythonTask

from backend_reader import RemoteFileOutputReader
from backend_reader.documents import FailureRecord
from backend_reader.upstream_rule import earliest_error
from rootcause_core.ordering import Role
from rootcause_harness.faults import (
    BEFORE_INIT,
    NOT_STORE_HOST_POD,
    STORE_HOST_POD,
    Communication,
    Fault,
    FaultKind,
)
from rootcause_harness.flytekit.console import console_at_decision
from rootcause_harness.flytekit.job import JobResult, JobSpec, StoreAccess, run_job
from rootcause_harness.flytekit.training import train_2x2
from testbed.object_stores import ObjectStore
from tests.elastic_tasks.forked_training import (
    forked_train_2x1,
    forked_train_2x1_rank0_saves,
    forked_train_2x2,
    forked_train_2x2_short_init,
    forked_train_2x2_short_timeout,
    forked_train_3x1,
    forked_train_3x1_short_init,
    forked_train_3x1_short_timeout,
)
from tests.timestamps import assert_sub_second

pytestmark = pytest.mark.slow


def _run(store: StoreAccess, fault: Fault, tmp_path: Path, task: PythonTask = forked_train_2x2, nnodes: int = 2,
         nproc_per_node: int = 2) -> JobResult:
    result = run_job(JobSpec(task=task, nnodes=nnodes, nproc_per_node=nproc_per_node, store=store, fault=fault),
                     work_dir=tmp_path)
    assert not result.timed_out, f"pods did not exit; logs in {result.sim_dir}"
    assert result.injected_rank is not None, "the faulty worker never started training"
    return result


def _assert_verdict(result: JobResult, storage_options: dict | None = None) -> None:
    read = RemoteFileOutputReader(result.output_prefix, storage_options=storage_options, expected_workers=2,
                                  settle_timeout=10).read_all()
    assert not read.skipped, read.skipped
    root = read.failures[0]
    logs = f"pod logs in {result.sim_dir}"
    assert (root.worker, root.global_rank) == (result.injected_worker, result.injected_rank), logs
    assert root.role == Role.CANDIDATE, logs
    assert {f.worker for f in read.failures} == {"train-worker-0", "train-worker-1"}, logs
    fs = result.spec.store.filesystem()
    console = earliest_error(result.output_prefix, fs)
    assert console is not None and console.worker == result.injected_worker, f"Go rule: {console}; {logs}"


def test_an_aborting_worker_in_pod_one_is_the_reported_root_cause(file_store: ObjectStore, tmp_path: Path) -> None:
    result = _run(StoreAccess(file_store.root), Fault(FaultKind.SIGABRT, pod="train-worker-1", local_rank=1), tmp_path,
                  train_2x2)
    _assert_verdict(result)


@pytest.mark.parametrize("kind", [FaultKind.SIGSEGV, FaultKind.EXIT], ids=["segfault", "silent-exit-3"])
def test_a_worker_that_segfaults_or_exits_without_a_word_is_the_reported_root_cause(
    kind: FaultKind, file_store: ObjectStore, tmp_path: Path,
) -> None:
    """Neither leaves a record: the exit (its signal or code, its time from the death watcher) is all
    the evidence, and a peer in the same pod is ended as a victim beside it."""
    result = _run(StoreAccess(file_store.root), Fault(kind, pod="train-worker-0", local_rank=1), tmp_path)
    _assert_verdict(result)


def test_a_raising_worker_is_the_reported_root_cause_on_fake_gcs_server(gcs_store: ObjectStore,
                                                                        tmp_path: Path) -> None:
    """The same job with every pod uploading to, and the readers listing, a real GCS API server."""
    store = StoreAccess(gcs_store.new_prefix("e2e"), gcs_store.storage_options, gcs_store.env)
    result = _run(store, Fault(FaultKind.RAISE, pod="train-worker-1", local_rank=0), tmp_path, forked_train_2x1,
                  nproc_per_node=1)
    _assert_verdict(result, gcs_store.storage_options)


def test_earlier_of_two_independent_errors_50ms_apart_wins(file_store: ObjectStore, tmp_path: Path) -> None:
    fault = Fault(FaultKind.ORDERING, pod="train-worker-0", local_rank=0, second_pod="train-worker-1",
                  second_local_rank=0, second_delay_s=0.05)
    result = _run(StoreAccess(file_store.root), fault, tmp_path, forked_train_2x1, nproc_per_node=1)
    _assert_verdict(result)
    # at the operator's decision too, whichever pod exits first: the pods agreed the first failure is
    # pod 0's, so pod 1's own candidate document waits for pod 0's (and error.pb) before it exits
    view = console_at_decision(result, aggregation=True)
    assert (view.outcome, view.worker) == ("error", "train-worker-0"), (view, f"pod logs in {result.sim_dir}")
    read = RemoteFileOutputReader(result.output_prefix).read_all()
    first, second = read.failures[0], read.failures[1]
    assert second.worker == "train-worker-1", read.failures
    if "independent later failure" in second.message:
        # it failed on its own before its pod's teardown reached it (however long the agent took to
        # probe it): a second root-cause candidate, ordered after the first by nanoseconds
        assert second.role == Role.CANDIDATE, second
        assert first.timestamp_ns < second.timestamp_ns
        assert_sub_second(first.timestamp_ns, second.timestamp_ns)
    else:
        # its pod's agent, told of the first failure, ended it within the 50 ms (SIGTERM, or the
        # SignalException a forked worker raises for it): a victim, whose own failure never came
        assert second.role == Role.VICTIM, second


def test_a_pod_whose_clock_runs_ahead_is_still_named_by_both_readers(file_store: ObjectStore,
                                                                             tmp_path: Path) -> None:
    """The faulty pod's clock is 5 s ahead: its failure is stamped later than its victims' by the
    clocks, and only the victims' moved stamps keep upstream Flyte's earliest-timestamp rule right."""
    fault = Fault(FaultKind.RAISE, pod="train-worker-1", local_rank=0, clock_offset_s=5.0)
    result = _run(StoreAccess(file_store.root), fault, tmp_path, forked_train_2x1, nproc_per_node=1)
    _assert_verdict(result)
    read = RemoteFileOutputReader(result.output_prefix).read_all()
    root, victim = read.failures[0], read.failures[-1]
    assert victim.role == Role.VICTIM and victim.worker == "train-worker-0"
    # what the clocks said: the root cause "after" its victim, so only roles can order them
    assert root.timestamp_ns > victim.timestamp_ns


@pytest.mark.parametrize(
    ("pod", "nnodes"),
    [(STORE_HOST_POD, 2), (NOT_STORE_HOST_POD, 3)],  # both kinds of pod, two pod counts
    ids=["2x1-store-host", "3x1"],
)
def test_a_pod_that_vanishes_whole_is_named_by_its_peers(pod: str, nnodes: int, file_store: ObjectStore,
                                                           tmp_path: Path) -> None:
    """Every process of one pod is SIGKILLed at once (a lost node): it writes nothing, its peers'
    workers fail as victims, and their agents find it gone and write for it; both readers name it."""
    task = forked_train_2x1 if nnodes == 2 else forked_train_3x1
    fault = Fault(FaultKind.VANISH, pod=pod, local_rank=0)
    result = _run(StoreAccess(file_store.root), fault, tmp_path, task, nnodes, nproc_per_node=1)
    logs = f"pod logs in {result.sim_dir}"
    read = RemoteFileOutputReader(result.output_prefix, expected_workers=nnodes, settle_timeout=10).read_all()
    assert not read.skipped, read.skipped
    root = read.failures[0]
    assert (root.worker, root.role) == (result.injected_worker, Role.LOST_POD), logs
    assert root.recoverable and "no error file from this pod" in root.message, logs
    assert all(f.role in (Role.LOST_POD, Role.VICTIM) for f in read.failures), logs
    assert {f.worker for f in read.failures if f.role == Role.VICTIM} == (
        {pod_name for pod_name in (f"train-worker-{i}" for i in range(nnodes)) if pod_name != result.injected_worker}
    ), logs
    console = earliest_error(result.output_prefix, result.spec.store.filesystem())
    assert console is not None and console.worker == result.injected_worker, f"Go rule: {console}; {logs}"


#: A frozen pod's peers must be done long before any collective timeout (gloo's default: 30 min).
FROZEN_POD_NAMED_WITHIN_S = 60


@pytest.mark.parametrize(
    ("pod", "nnodes"),
    [(STORE_HOST_POD, 2), (NOT_STORE_HOST_POD, 3)],  # the store's host (its store freezes too), and another
    ids=["2x1-store-host", "3x1"],
)
def test_a_pod_that_freezes_is_named_by_its_peers_long_before_any_collective_timeout(
    pod: str, nnodes: int, file_store: ObjectStore, tmp_path: Path
) -> None:
    """Every process of one pod is SIGSTOPped at once (a frozen node, a partition): its sockets stay
    open, so no collective fails; the peer that watches its heartbeat declares it lost after
    ``lost_after_s``, every survivor ends its workers (victims), and both readers name the frozen pod.
    When it hosted the rendezvous store, every store call of its peers times out instead, and each
    names the store's host on its own."""
    task = forked_train_2x1 if nnodes == 2 else forked_train_3x1
    result = _run(StoreAccess(file_store.root), Fault(FaultKind.FREEZE, pod=pod, local_rank=0), tmp_path, task,
                  nnodes, nproc_per_node=1)
    logs = f"pod logs in {result.sim_dir}"
    survivors = [p for p in result.pods if p.name != result.injected_worker]
    assert all(p.returncode is not None for p in survivors), (result.pods, logs)  # exited, not deleted
    assert result.fault_ns is not None
    assert max(p.exited_ns for p in survivors) - result.fault_ns < FROZEN_POD_NAMED_WITHIN_S * 10**9, logs
    read = RemoteFileOutputReader(result.output_prefix, expected_workers=nnodes, settle_timeout=10).read_all()
    assert not read.skipped, read.skipped
    root = read.failures[0]
    assert (root.worker, root.role) == (result.injected_worker, Role.LOST_POD), logs
    assert root.recoverable, logs
    assert {f.worker for f in read.failures if f.role == Role.VICTIM} == {p.name for p in survivors}, logs
    console = earliest_error(result.output_prefix, result.spec.store.filesystem())
    assert console is not None and console.worker == result.injected_worker, f"Go rule: {console}; {logs}"


@pytest.mark.parametrize("kind", [FaultKind.VANISH, FaultKind.FREEZE])
def test_a_pod_lost_before_the_process_group_forms_is_named_by_its_silence_not_the_init_timeout(
    kind: FaultKind, file_store: ObjectStore, tmp_path: Path
) -> None:
    """The pod dies (or freezes) after the rendezvous, before ``init_process_group``: its peers wait
    for its store key, which would end in their init timeout and a hung-rank verdict. Its heartbeat's
    silence names the pod first, as lost."""
    fault = Fault(kind, pod=NOT_STORE_HOST_POD, local_rank=0, step=BEFORE_INIT)
    result = _run(StoreAccess(file_store.root), fault, tmp_path, forked_train_3x1, 3, nproc_per_node=1)
    logs = f"pod logs in {result.sim_dir}"
    read = RemoteFileOutputReader(result.output_prefix, expected_workers=3, settle_timeout=10).read_all()
    root = read.failures[0]
    assert (root.worker, root.role) == (result.injected_worker, Role.LOST_POD), logs
    console = earliest_error(result.output_prefix, result.spec.store.filesystem())
    assert console is not None and console.worker == result.injected_worker, f"Go rule: {console}; {logs}"


@pytest.mark.parametrize(
    ("task", "nnodes", "nproc_per_node", "pod"),
    [(forked_train_2x2_short_timeout, 2, 2, "train-worker-1"), (forked_train_3x1_short_timeout, 3, 1, STORE_HOST_POD)],
    ids=["2x2-beside-a-peer", "3x1-alone-in-the-store-host"],
)
def test_a_rank_that_hangs_is_named_with_its_stack_by_both_readers(
    task: PythonTask, nnodes: int, nproc_per_node: int, pod: str, file_store: ObjectStore, tmp_path: Path
) -> None:
    """One rank sleeps at step 3 while its peers enter the next all-reduce and time out (3 s). Its
    agent probes it before the teardown (its stack, its last collective): it is the root cause,
    '[root cause] ... hung', and every timed-out peer a victim. Alone in its pod (3x1), nothing local
    fails: the other pods' failure announcements end it."""
    result = _run(StoreAccess(file_store.root), Fault(FaultKind.HANG, pod=pod, local_rank=nproc_per_node - 1),
                  tmp_path, task, nnodes, nproc_per_node)
    _assert_hung_rank_named(result, nnodes, "never entered all_reduce #")


def test_a_pod_waiting_for_a_slower_one_in_the_exit_barrier_is_not_taken_for_lost(
    file_store: ObjectStore, tmp_path: Path
) -> None:
    """Rank 0 saves a checkpoint for 8 s after training; the other pod waits in torch's exit barrier,
    whose store wait holds the client the heartbeat shares. It says it is done as it enters the
    barrier, so its silence is no lost pod, and the job succeeds."""
    spec = JobSpec(task=forked_train_2x1_rank0_saves, nnodes=2, nproc_per_node=1, store=StoreAccess(file_store.root))
    result = run_job(spec, work_dir=tmp_path)
    logs = f"pod logs in {result.sim_dir}"
    assert not result.timed_out and all(pod.returncode == 0 for pod in result.pods), logs
    assert not any("declaring it lost" in pod.log_path.read_text(errors="replace") for pod in result.pods), logs
    read = RemoteFileOutputReader(result.output_prefix, settle_timeout=0).read_all()
    assert not read.failures, logs


@pytest.mark.parametrize(
    ("communication", "never_entered"),
    [
        (Communication.SEND_RECV, "never entered a point-to-point "),
        (Communication.BROADCAST_RECEIVER, "never entered broadcast #"),
    ],
    ids=["ring-of-send-recv", "broadcast-receiver"],
)
def test_a_rank_that_hangs_outside_an_all_reduce_is_named_by_both_readers(
    communication: Communication, never_entered: str, file_store: ObjectStore, tmp_path: Path
) -> None:
    """The step exchanges by a ring of blocking send/recv (gloo's Flight Recorder records none: the
    neighbour that times out names the peer it waited for), or by a broadcast from a rank of the
    other pod (its root times out on its sends while the other receivers go on): the rank that
    sleeps is the root cause either way."""
    fault = Fault(FaultKind.HANG, pod="train-worker-1", local_rank=1, communication=str(communication))
    result = _run(StoreAccess(file_store.root), fault, tmp_path, forked_train_2x2_short_timeout, 2, 2)
    _assert_hung_rank_named(result, 2, never_entered)


@pytest.mark.parametrize(
    ("task", "nnodes", "nproc_per_node", "pod"),
    [(forked_train_2x2_short_init, 2, 2, "train-worker-1"), (forked_train_3x1_short_init, 3, 1, STORE_HOST_POD)],
    ids=["2x2-beside-a-peer", "3x1-alone-in-the-store-host"],
)
def test_a_rank_that_never_reaches_init_process_group_is_named_by_the_peers_that_waited_for_it(
    task: PythonTask, nnodes: int, nproc_per_node: int, pod: str, file_store: ObjectStore, tmp_path: Path
) -> None:
    """One rank sleeps before ``init_process_group`` (a data download, a hung mount); every peer
    waits for its key in the store and fails with ``DistStoreError: wait timeout ... keys: .../<rank>``.
    The key names it: '[root cause] ... hung', never entered the initialisation, for both readers;
    every peer's timeout is a victim's. Alone in the store-host pod (3x1), the other pods'
    announcements end it and tell its agent which rank they waited for."""
    result = _run(StoreAccess(file_store.root), Fault(FaultKind.INIT_HANG, pod=pod, local_rank=nproc_per_node - 1),
                  tmp_path, task, nnodes, nproc_per_node)
    others = _assert_hung_rank_named(result, nnodes, "never entered the initialisation of process group 0")
    assert any("wait timeout after" in f.message for f in others), result.sim_dir  # the peers' own errors kept


def _assert_hung_rank_named(result: JobResult, nnodes: int, never_entered: str) -> list[FailureRecord]:
    """Both readers name the injected rank '[root cause] ... hung' with its stack (stuck in
    ``maybe_inject``), every other failure is a victim's, every pod wrote; the victims are returned."""
    logs = f"pod logs in {result.sim_dir}"
    read = RemoteFileOutputReader(result.output_prefix, expected_workers=nnodes, settle_timeout=10).read_all()
    assert not read.skipped, read.skipped
    root, *others = read.failures
    assert (root.worker, root.global_rank, root.role) == (result.injected_worker, result.injected_rank,
                                                          Role.CANDIDATE), logs
    assert root.message.startswith(f"[root cause] rank {result.injected_rank} ") and " hung: " in root.message, logs
    assert never_entered in root.message and "in maybe_inject" in root.message, logs  # its stack
    assert others and all(f.role == Role.VICTIM for f in others), logs
    assert {f.worker for f in read.failures} == {f"train-worker-{i}" for i in range(nnodes)}, logs
    console = earliest_error(result.output_prefix, result.spec.store.filesystem())
    assert console is not None and console.worker == result.injected_worker, f"Go rule: {console}; {logs}"
    assert console.message.startswith(f"[root cause] rank {result.injected_rank} "), f"Go rule: {console}"
    return others
