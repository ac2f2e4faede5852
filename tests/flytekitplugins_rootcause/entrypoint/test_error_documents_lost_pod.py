"""A pod that vanished writes nothing: its peers write for it, and both readers name it.

The victim pod's exception carries the peers it found lost; its plan (built as the entrypoint builds
it) holds one more document per lost pod, and ``write_error_documents`` writes each, named for that
peer. Then this project's reader and the port of upstream Flyte's Go rule read the folder as it lies.
"""

from __future__ import annotations

from pathlib import Path

import fsspec
from flyteidl.core import errors_pb2

from backend_reader import RemoteFileOutputReader
from backend_reader.documents import ErrorKind
from backend_reader.upstream_rule import earliest_error
from flytekitplugins_rootcause.entrypoint.error_documents import (
    LOST_POD_CODE,
    ErrorDocumentPlan,
    ErrorFilePolicy,
    last_resort_document,
)
from flytekitplugins_rootcause.entrypoint.error_upload import write_error_documents
from flytekitplugins_rootcause.exceptions import ElasticRootCauseError, ElasticRootCauseRecoverableError
from rootcause_core.error_files import listing_key_of
from rootcause_core.ordering import Role
from rootcause_core.testimony import LOST_POD_STAMP_DELAY_NS, LostPod, Member, read_testimony
from rootcause_core.timestamps import from_protobuf
from tests.entrypoint_tasks.raising import DEFAULT_TIMESTAMP_NS, failures

PER_WORKER = ErrorFilePolicy(per_worker_files=True, error_pb_if_absent=False)
MEMBERS = (Member(0, "train-worker-0", 0, 2, True), Member(1, "train-worker-1", 2, 2, False))
LAST_SEEN_NS = DEFAULT_TIMESTAMP_NS - 300_000_000


Planned = tuple[ErrorDocumentPlan, bytes]


def victim_document(lost: tuple[LostPod, ...]) -> Planned:
    victims = [failure.with_role(Role.VICTIM) for failure in failures(recoverable=True)]
    error = ElasticRootCauseRecoverableError(
        "[victim] rank 2 was failed by a peer", victims, members=MEMBERS, lost_pods=lost
    )
    return last_resort_document(error, "train-worker-1")


def write(prefix: Path, planned: Planned, worker: str, policy: ErrorFilePolicy = PER_WORKER) -> None:
    plan, document = planned
    write_error_documents(str(prefix), document, worker, plan, policy, filesystems=None)  # type: ignore[arg-type]


def test_a_victim_that_found_a_peer_lost_writes_a_document_for_it(tmp_path: Path) -> None:
    lost = LostPod(0, "train-worker-0", LAST_SEEN_NS)
    write(tmp_path, victim_document((lost,)), "train-worker-1")

    names = sorted(p.name for p in tmp_path.iterdir())
    assert len(names) == 2
    keys = {name.split("-")[3]: listing_key_of(name) for name in names}  # error-train-worker-<N>-...
    assert keys["0"] is not None and keys["0"].role == Role.LOST_POD and keys["0"].timestamp_ns == LAST_SEEN_NS
    assert keys["1"] is not None and keys["1"].role == Role.VICTIM

    (for_lost,) = (p for p in tmp_path.iterdir() if p.name.startswith("error-train-worker-0-"))
    container = errors_pb2.ErrorDocument.FromString(for_lost.read_bytes()).error
    assert container.worker == "train-worker-0" and container.code == LOST_POD_CODE
    assert container.kind == errors_pb2.ContainerError.RECOVERABLE
    assert from_protobuf(container.timestamp) == DEFAULT_TIMESTAMP_NS + LOST_POD_STAMP_DELAY_NS
    said = read_testimony(container.message)
    assert said is not None and said.reported_by == "train-worker-1" and said.lost == (lost,)
    assert said.members == MEMBERS

    read = RemoteFileOutputReader(str(tmp_path)).read_all()
    root, victim = read.failures
    assert (root.worker, root.role, root.timestamp_ns) == ("train-worker-0", Role.LOST_POD, LAST_SEEN_NS)
    assert root.message.startswith("[lost pod] pod train-worker-0 (group rank 0) is lost: no error file")
    assert root.recoverable and root.kind == ErrorKind.SYSTEM
    assert (victim.worker, victim.role) == ("train-worker-1", Role.VICTIM)
    console = earliest_error(str(tmp_path), fsspec.filesystem("file"))
    assert console is not None and console.worker == "train-worker-0"


def test_error_pb_holds_the_lost_pods_document_for_backends_that_read_only_it(tmp_path: Path) -> None:
    both = ErrorFilePolicy(per_worker_files=True, error_pb_if_absent=True)
    write(tmp_path, victim_document((LostPod(0, "train-worker-0", LAST_SEEN_NS),)), "train-worker-1", both)
    shared = errors_pb2.ErrorDocument.FromString((tmp_path / "error.pb").read_bytes()).error
    assert shared.worker == "train-worker-0" and shared.code == LOST_POD_CODE
    read = RemoteFileOutputReader(str(tmp_path)).read_all()
    assert len(read.failures) == 2  # error.pb is a copy of the lost pod's document, not one more failure


def test_a_pod_that_reported_its_own_failure_outranks_what_its_peers_said_of_it(tmp_path: Path) -> None:
    """A peer judged lost that did write its own error (its agent was too busy to beat, say): its own
    report wins with both readers, and the document written for it ranks after it."""
    write(tmp_path, victim_document((LostPod(0, "train-worker-0", LAST_SEEN_NS),)), "train-worker-1")
    own = ElasticRootCauseError("[root cause] rank 1 raised", failures(recoverable=False))
    write(tmp_path, last_resort_document(own, "train-worker-0"), "train-worker-0")

    read = RemoteFileOutputReader(str(tmp_path)).read_all()
    assert [(f.worker, f.role) for f in read.failures] == [
        ("train-worker-0", Role.CANDIDATE),
        ("train-worker-0", Role.LOST_POD),
        ("train-worker-1", Role.VICTIM),
    ]
    console = earliest_error(str(tmp_path), fsspec.filesystem("file"))
    assert console is not None and console.worker == "train-worker-0" and console.message.startswith("[root cause]")


def test_no_document_is_written_for_nobody_and_none_for_a_document_written_for_a_lost_pod(tmp_path: Path) -> None:
    assert victim_document(())[0].lost_pod_documents == ()
    plan, _ = victim_document((LostPod(0, "train-worker-0", None),))
    (for_lost,) = plan.lost_pod_documents
    assert for_lost.plan.lost_pod_documents == ()  # no chain of hearsay
    # a document nothing is known of (no plan) is written as it is: one file, a plain name, nothing else
    unplanned = b"\xff not a document"
    write_error_documents(str(tmp_path), unplanned, "pod-1", None, PER_WORKER, filesystems=None)  # type: ignore[arg-type]
    (written,) = tmp_path.iterdir()
    assert written.name.startswith("error-pod-1-") and listing_key_of(written.name) is None
    assert written.read_bytes() == unplanned
