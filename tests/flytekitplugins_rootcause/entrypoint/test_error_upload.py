"""Writing error documents to real stores: create-if-absent holds on each, failures are reported.

In-process against the loopback servers (the entrypoint subprocess tests cover the same code end to
end); here each store's conditional write is checked on its own.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from botocore.exceptions import ClientError
from s3fs.errors import translate_boto_error

from flytekitplugins_rootcause.entrypoint.error_documents import ErrorFilePolicy
from flytekitplugins_rootcause.entrypoint.error_upload import (
    ErrorDocumentWriteError,
    LocalErrorStore,
    store_for,
    write_error_documents,
)
from rootcause_core.store_retry import is_write_conflict
from testbed.object_stores import ObjectStore
from tests.entrypoint_tasks.harness import flytekit_file_access, list_names, read_bytes

pytestmark = pytest.mark.slow

BOTH = ErrorFilePolicy(per_worker_files=True, error_pb_if_absent=True)




def test_create_if_absent_keeps_the_first_writer_on_every_store(
    any_store: ObjectStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = store_for(any_store.root, flytekit_file_access(tmp_path, any_store, monkeypatch))
    path = f"{any_store.new_prefix('create')}/error.pb"
    assert store.create(path, b"first") is True
    assert store.create(path, b"second") is False
    assert read_bytes(any_store, path) == b"first"


def test_local_create_if_absent_has_exactly_one_winner_among_racing_threads(tmp_path: Path) -> None:
    path = str(tmp_path / "out" / "error.pb")
    store = LocalErrorStore()
    start = threading.Barrier(16)
    results: dict[int, bool] = {}

    def writer(index: int) -> None:
        start.wait()
        results[index] = store.create(path, f"writer {index}".encode())

    threads = [threading.Thread(target=writer, args=(index,)) for index in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [index for index, created in results.items() if created]
    assert len(winners) == 1
    assert Path(path).read_bytes() == f"writer {winners[0]}".encode()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["error.pb"]  # no temporary left


def test_per_worker_file_and_error_pb_hold_the_same_document(
    file_store: ObjectStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = file_store.new_prefix("docs")
    file_access = flytekit_file_access(tmp_path, file_store, monkeypatch)
    outcome = write_error_documents(f"file://{prefix}", b"doc", "pod/../0", None, BOTH, file_access)
    names = list_names(file_store, prefix)
    assert len(names) == 2 and "error.pb" in names
    (per_worker,) = (name for name in names if name != "error.pb")
    assert per_worker.startswith("error-pod_0-")
    assert outcome.per_worker_path == f"{prefix}/{per_worker}" and outcome.shared_created is True
    assert read_bytes(file_store, f"{prefix}/{per_worker}") == read_bytes(file_store, f"{prefix}/error.pb") == b"doc"


@pytest.mark.parametrize("fixture", ["gcs_store", "s3_store"])
def test_a_missing_bucket_is_reported_for_every_file_with_path_and_reason(
    fixture: str, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store: ObjectStore = request.getfixturevalue(fixture)
    prefix = f"{store.protocol}://no-such-bucket-rootcause/run/out"
    with pytest.raises(ErrorDocumentWriteError) as excinfo:
        write_error_documents(prefix, b"doc", "pod-0", None, BOTH, flytekit_file_access(tmp_path, store, monkeypatch))
    paths = [failure.path for failure in excinfo.value.failures]
    assert len(paths) == 2 and paths[1] == f"{prefix}/error.pb" and paths[0].startswith(f"{prefix}/error-pod-0-")
    for failure in excinfo.value.failures:
        assert "\n" not in failure.describe() and failure.reason


def test_an_unwritable_local_prefix_is_reported(
    file_store: ObjectStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_bytes(b"")
    file_access = flytekit_file_access(tmp_path, file_store, monkeypatch)
    with pytest.raises(ErrorDocumentWriteError) as excinfo:
        write_error_documents(str(blocker / "out"), b"doc", "pod-0", None, BOTH, file_access)
    assert {failure.reason.split(":")[0] for failure in excinfo.value.failures} == {"NotADirectoryError"}


def _s3_error(code: str, status: int) -> BaseException:
    """What s3fs raises for an S3 error response: its own translation of botocore's ClientError."""
    response = {"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return translate_boto_error(ClientError(response, "PutObject"))


def test_only_s3_write_conflicts_are_retried() -> None:
    assert is_write_conflict(_s3_error("ConditionalRequestConflict", 409))
    assert not is_write_conflict(_s3_error("NoSuchBucket", 404))
    assert not is_write_conflict(_s3_error("AccessDenied", 403))
    assert isinstance(_s3_error("PreconditionFailed", 412), OSError)
    assert not is_write_conflict(_s3_error("PreconditionFailed", 412))
    assert not is_write_conflict(FileNotFoundError("gs://bucket/x"))
