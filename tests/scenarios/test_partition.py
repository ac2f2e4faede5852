"""A pod cut off the network is named by the healthy side, at the operator's decision and by our reader.

Each pod runs in its own network namespace on a bridge (``rootcause_harness.netns``), the object
store (moto's S3 server) on the bridge's address. At step 3 one pod loses the network as a failed
NIC or switch port takes it: every packet dropped both ways, nothing closed, its processes running
on, its kubelet silent, the object store out of its reach. It sees every other pod fall silent (and
the store, when another pod hosts it); by the isolation rule (``rootcause_core.liveness.isolation_side``) it
names no one lost when it reaches fewer peers than it would accuse. The healthy side names it.
Every pod, the rendezvous store's host included, at 2 x 2 and 3 x 1.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from flyteidl2.core import execution_pb2
from flytekit.core.base_task import PythonTask

from backend_reader import RemoteFileOutputReader
from rootcause_harness import netns
from rootcause_harness.faults import Fault, FaultKind
from rootcause_harness.flyte2 import training as flyte2_training
from rootcause_harness.flyte2.console import console_at_decision as flyte2_console
from rootcause_harness.flyte2.job import JobSpec as Flyte2JobSpec
from rootcause_harness.flyte2.job import run_job as run_flyte2_job
from rootcause_harness.flyte2.verdict import rootcause_verdict
from rootcause_harness.flytekit.console import console_at_decision
from rootcause_harness.flytekit.job import JobSpec, StoreAccess, run_job
from rootcause_harness.flytekit.training import train_2x2, train_3x1
from rootcause_harness.operator import JobPhase
from testbed.object_stores import moto_s3_store

pytestmark = [pytest.mark.slow, pytest.mark.skipif(netns.available() is not None, reason=str(netns.available()))]


@pytest.mark.parametrize(
    ("task", "nnodes", "nproc", "cut"),
    [
        (train_2x2, 2, 2, "train-worker-0"),
        (train_2x2, 2, 2, "train-worker-1"),
        (train_3x1, 3, 1, "train-worker-0"),
        (train_3x1, 3, 1, "train-worker-1"),
        (train_3x1, 3, 1, "train-worker-2"),
    ],
    ids=["2x2-store-host", "2x2-other", "3x1-store-host", "3x1-middle", "3x1-last"],
)
def test_a_cut_off_pod_is_named_by_the_healthy_side(tmp_path: Path, task: PythonTask, nnodes: int, nproc: int,
                                                     cut: str) -> None:
    with netns.PodNetwork() as network, moto_s3_store(host=network.gateway) as store:
        spec = JobSpec(task=task, nnodes=nnodes, nproc_per_node=nproc,
                       store=StoreAccess(store.new_prefix("partition"), store.storage_options, store.env),
                       fault=Fault(FaultKind.PARTITION, pod=cut, step=3), network=network, termination_grace_s=5,
                       delete_after_decision_s=1, timeout_s=180)
        result = run_job(spec, work_dir=tmp_path)
        logs = f"pod logs in {result.sim_dir}"
        assert not result.timed_out, logs
        view = console_at_decision(result, aggregation=True)
        assert result.operator.phase == JobPhase.SUCCEEDED and result.operator.pod != cut, (result.operator, logs)
        assert (view.outcome, view.worker) == ("error", cut), (view, logs)
        assert view.message.startswith("[lost pod]"), view.message
        read = RemoteFileOutputReader(result.output_prefix, settle_timeout=0).read_error()
        assert read is not None and read.execution_error.worker == cut, (read, logs)


def test_a_cut_off_store_host_that_still_reaches_the_object_store_accuses_no_one(tmp_path: Path) -> None:
    """A partition of the pods' network alone (the object store reached another way, here a shared
    folder): the cut-off store host could write, and sees both peers fall silent, but it reached
    none of them directly, so it names no one lost; its peers name it."""
    with netns.PodNetwork() as network:
        spec = JobSpec(task=train_3x1, nnodes=3, nproc_per_node=1, store=StoreAccess(str(tmp_path / "store")),
                       fault=Fault(FaultKind.PARTITION, pod="train-worker-0", step=3), network=network,
                       termination_grace_s=5, delete_after_decision_s=1, timeout_s=180)
        result = run_job(spec, work_dir=tmp_path / "pods")
    logs = f"pod logs in {result.sim_dir}"
    view = console_at_decision(result, aggregation=True)
    assert (view.outcome, view.worker) == ("error", "train-worker-0"), (view, logs)
    cut_log = (result.sim_dir / "train-worker-0.log").read_text()
    assert "this pod is the one cut off from the network, so it declares no one lost" in cut_log, logs
    accusations = [path.name for path in (tmp_path / "store").rglob("error-train-worker-[12]-*.rc1l*.pb")]
    assert accusations == [], (accusations, logs)


@pytest.mark.parametrize("cut", ["train-worker-0", "train-worker-2"], ids=["store-host", "other"])
def test_flyte_2_a_cut_off_pod_is_named_by_the_healthy_majority(tmp_path: Path, cut: str) -> None:
    """Flyte 2, 3 x 1, the pods' network alone cut (the action's bucket is a shared folder): the
    healthy pods agree on the cut-off pod, and ``error.pb`` at the operator's decision names it."""
    with netns.PodNetwork() as network:
        spec = Flyte2JobSpec(task=flyte2_training.train_3x1, nnodes=3, nproc_per_node=1, root=tmp_path / "bucket",
                             fault=Fault(FaultKind.PARTITION, pod=cut, step=3), network=network,
                             termination_grace_s=5, delete_after_decision_s=1, timeout_s=180)
        result = run_flyte2_job(spec, work_dir=tmp_path / "pods")
    logs = f"pod logs in {result.sim_dir}"
    view = flyte2_console(result)
    assert result.operator.phase == JobPhase.SUCCEEDED and result.operator.pod != cut, (result.operator, logs)
    assert (view.outcome, view.worker) == ("error", cut), (view, logs)


def _named_lost(store: Path, pod: str) -> list[str]:
    """The documents under ``store`` that name ``pod`` lost (a survivor's, listed under its name)."""
    return sorted(path.name for path in store.rglob(f"error-{pod}-*.rc1l*.pb"))


@pytest.mark.parametrize("cut", ["train-worker-0", "train-worker-1"], ids=["store-host", "other"])
def test_two_pods_one_cut_off_that_still_writes_the_output_prefix_never_names_the_healthy_one(
        tmp_path: Path, cut: str) -> None:
    """2 x 2, one pod's network cut while both still write the output prefix (a shared folder): an
    even split, which the peers alone cannot settle. The cut-off pod reaches no third party on the
    network (the cluster's API endpoint), its peer does and says so in the object store: the healthy
    pod names the cut one, and the cut one names no one, at the operator's decision and after the
    last pod's exit."""
    healthy = "train-worker-1" if cut == "train-worker-0" else "train-worker-0"
    store = tmp_path / "store"
    with netns.PodNetwork() as network:
        spec = JobSpec(task=train_2x2, nnodes=2, nproc_per_node=2, store=StoreAccess(str(store)),
                       fault=Fault(FaultKind.PARTITION, pod=cut, step=3), network=network,
                       termination_grace_s=5, delete_after_decision_s=1, timeout_s=180)
        result = run_job(spec, work_dir=tmp_path / "pods")
    logs = f"pod logs in {result.sim_dir}"
    assert not result.timed_out, logs
    view = console_at_decision(result, aggregation=True)
    assert result.operator.phase == JobPhase.SUCCEEDED and result.operator.pod == healthy, (result.operator, logs)
    assert (view.outcome, view.worker) == ("error", cut), (view, logs)
    assert view.message.startswith("[lost pod]"), view.message
    assert _named_lost(store, healthy) == [], logs
    cut_log = (result.sim_dir / f"{cut}.log").read_text()
    assert "this pod is the one cut off from the network, so it declares no one lost" in cut_log, logs
    read = RemoteFileOutputReader(result.output_prefix, settle_timeout=0).read_error()
    assert read is not None and read.execution_error.worker != healthy, (read, logs)


def test_two_pods_that_lose_only_the_link_between_them_both_name_the_link(tmp_path: Path) -> None:
    """2 x 2, only the link between the two pods cut (a network policy or a route between their
    nodes), both still reaching the object store and the cluster's API endpoint: the evidence is
    symmetric, so neither pod is named lost. Both documents say that the link between them was lost,
    and name both pods."""
    store = tmp_path / "store"
    with netns.PodNetwork() as network:
        spec = JobSpec(task=train_2x2, nnodes=2, nproc_per_node=2, store=StoreAccess(str(store)),
                       fault=Fault(FaultKind.LINK_CUT, pod="train-worker-1", step=3), network=network,
                       termination_grace_s=5, delete_after_decision_s=1, timeout_s=180)
        result = run_job(spec, work_dir=tmp_path / "pods")
    logs = f"pod logs in {result.sim_dir}"
    assert not result.timed_out, logs
    both = "train-worker-0 and train-worker-1"
    view = console_at_decision(result, aggregation=True)
    assert result.operator.phase == JobPhase.SUCCEEDED, (result.operator, logs)
    assert (view.outcome, view.worker) == ("error", both), (view, logs)
    assert view.message.startswith("[lost link] the network link between pod "), view.message
    assert "train-worker-0" in view.message.split("\n")[0] and "train-worker-1" in view.message.split("\n")[0]
    for pod in ("train-worker-0", "train-worker-1"):
        named = _named_lost(store, pod)
        assert len(named) <= 1, (named, logs)  # the other end's document, if it wrote before the deletion
    documents = [path.read_bytes() for path in store.rglob("error-train-worker-*.rc1l*.pb")]
    assert documents and all(b"[lost pod]" not in data for data in documents), logs


@pytest.mark.parametrize("cut", ["train-worker-0", "train-worker-1"], ids=["store-host", "other"])
def test_flyte_2_two_pods_one_cut_off_never_names_the_healthy_one(tmp_path: Path, cut: str) -> None:
    """Flyte 2, 2 x 2, one pod's network cut while the action's bucket is a shared folder both still
    write: ``error.pb`` at the operator's decision names the cut-off pod, never the healthy one."""
    healthy = "train-worker-1" if cut == "train-worker-0" else "train-worker-0"
    with netns.PodNetwork() as network:
        spec = Flyte2JobSpec(task=flyte2_training.train_2x2, nnodes=2, nproc_per_node=2, root=tmp_path / "bucket",
                             fault=Fault(FaultKind.PARTITION, pod=cut, step=3), network=network,
                             termination_grace_s=5, delete_after_decision_s=1, timeout_s=180)
        result = run_flyte2_job(spec, work_dir=tmp_path / "pods")
    logs = f"pod logs in {result.sim_dir}"
    view = flyte2_console(result)
    assert result.operator.phase == JobPhase.SUCCEEDED and result.operator.pod == healthy, (result.operator, logs)
    assert (view.outcome, view.worker) == ("error", cut), (view, logs)
    # after the last pod's exit too: the cut-off pod, which still writes the bucket, wrote no error.pb naming its peer
    last = [_named_by_error_pb(path) for path in (tmp_path / "bucket").rglob("error.pb")]
    assert last and healthy not in last, (last, logs)


def _named_by_error_pb(path: Path) -> str | None:
    """The pod a Flyte 2 ``error.pb`` names, as the UI reads it."""
    document = execution_pb2.ErrorDocument()
    document.ParseFromString(path.read_bytes())
    return rootcause_verdict(document.error.message)[0]
