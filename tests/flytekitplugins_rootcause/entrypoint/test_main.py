"""The real ``pyflyte-rootcause-execute`` as a pod runs it, against a local folder, GCS and S3.

Every test starts the installed console script in a fresh process with Flyte's command line and
environment, then reads back what it left under the output prefix.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest
from flyteidl.core import errors_pb2, execution_pb2

from backend_reader.documents import listing_key_for
from flytekitplugins_rootcause.entrypoint.command import WRITE_FAILED_EXIT_CODE
from flytekitplugins_rootcause.upstream.flytekit_entrypoint import PATCHED_ENTRYPOINT
from rootcause_core.error_files import ListingKey, listing_key_of
from rootcause_core.ordering import Role
from rootcause_core.roles import role_from_marker
from testbed.object_stores import ObjectStore
from testbed.reader_support import per_worker_name_pattern
from tests.entrypoint_tasks.harness import (
    FLYTEKIT_EXECUTE,
    Prefixes,
    list_names,
    new_prefixes,
    read_bytes,
    read_error,
    read_outputs,
    run_task,
)
from tests.entrypoint_tasks.raising import DEFAULT_TIMESTAMP_NS

pytestmark = pytest.mark.slow

PER_WORKER = per_worker_name_pattern()
FLYTEKIT_PER_POD = re.compile(r"^error-[0-9a-f]{32}\.pb$")
EXACT_TIME = divmod(DEFAULT_TIMESTAMP_NS, 1_000_000_000)


def _per_worker_files(names: list[str]) -> list[re.Match[str]]:
    return [match for name in names if (match := PER_WORKER.fullmatch(name))]


def _time(error: errors_pb2.ContainerError) -> tuple[int, int]:
    return error.timestamp.seconds, error.timestamp.nanos


def _named_as_read(store: ObjectStore, prefix: str, name: str) -> ListingKey:
    """The key in the name the pod gave its file (from its plan, never from parsing the bytes) is
    what the reader parses from the bytes under that name."""
    key = listing_key_of(name)
    assert key is not None and key == listing_key_for(read_bytes(store, f"{prefix}/{name}")), name
    return key


def test_root_cause_error_is_written_per_worker_and_as_error_pb(any_store: ObjectStore) -> None:
    prefixes = new_prefixes(any_store)
    run = run_task(any_store, prefixes, "configured", "root_cause", _F_WN="trainer-worker-1")
    assert run.returncode == 0, run.stderr

    names = list_names(any_store, prefixes.output)
    (match,) = _per_worker_files(names)
    assert sorted(names) == sorted([match.group(0), "error.pb"])  # nothing else: no staged copy, no outputs
    assert match.group("worker") == "trainer-worker-1"

    error = read_error(any_store, f"{prefixes.output}/{match.group(0)}")
    assert error.code == "USER:RuntimeError"
    assert error.kind == errors_pb2.ContainerError.NON_RECOVERABLE
    assert error.origin == execution_pb2.ExecutionError.USER
    assert error.worker == "trainer-worker-1"
    assert _time(error) == EXACT_TIME  # 789 ns survived: no float on the way
    assert role_from_marker(error.message) == Role.CANDIDATE
    assert "rank 1 on trainer-worker-1 failed: division by zero" in error.message
    assert error.message.splitlines()[0] == "[root cause] rank 1 on trainer-worker-1 failed: division by zero"
    key = _named_as_read(any_store, prefixes.output, match.group(0))
    assert key == ListingKey(Role.CANDIDATE, DEFAULT_TIMESTAMP_NS)
    # the copy for backends that read only error.pb is the same document
    shared = read_bytes(any_store, f"{prefixes.output}/error.pb")
    assert shared == read_bytes(any_store, f"{prefixes.output}/{match.group(0)}")


def test_recoverable_root_cause_under_backend_aggregation(any_store: ObjectStore) -> None:
    """A plain task on a backend that aggregates (``_F_DES``): one per-worker file, host name as worker."""
    prefixes = new_prefixes(any_store)
    run = run_task(any_store, prefixes, "plain", "fail_root_cause_recoverable", _F_DES="earliest")
    assert run.returncode == 0, run.stderr

    names = list_names(any_store, prefixes.output)
    (match,) = _per_worker_files(names)
    assert names == [match.group(0)]  # a plain task gets no shared error.pb: the backend aggregates
    error = read_error(any_store, f"{prefixes.output}/{match.group(0)}")
    assert error.kind == errors_pb2.ContainerError.RECOVERABLE
    assert error.origin == execution_pb2.ExecutionError.USER
    assert error.worker == socket.gethostname()
    assert _time(error) == EXACT_TIME
    _named_as_read(any_store, prefixes.output, match.group(0))


def test_a_later_writer_leaves_error_pb_to_the_first(file_store: ObjectStore) -> None:
    prefixes = new_prefixes(file_store)
    first = run_task(file_store, prefixes, "configured", "root_cause", _F_WN="pod-early")
    later_time = str(DEFAULT_TIMESTAMP_NS + 5_000_000_000)
    later = run_task(
        file_store,
        prefixes,
        "configured",
        "recoverable_root_cause",
        _F_WN="pod-late",
        ROOTCAUSE_TEST_TIMESTAMP_NS=later_time,
    )
    assert (first.returncode, later.returncode) == (0, 0), first.stderr + later.stderr

    names = list_names(file_store, prefixes.output)
    assert sorted(m.group("worker") for m in _per_worker_files(names)) == ["pod-early", "pod-late"]
    shared = read_error(file_store, f"{prefixes.output}/error.pb")
    assert (shared.worker, _time(shared)) == ("pod-early", EXACT_TIME)
    assert shared.kind == errors_pb2.ContainerError.NON_RECOVERABLE


@pytest.mark.parametrize(
    ("task_name", "per_worker", "shared"),
    [("no_shared", True, False), ("no_per_worker", False, True)],
)
def test_config_chooses_the_error_files(
    file_store: ObjectStore, task_name: str, per_worker: bool, shared: bool
) -> None:
    prefixes = new_prefixes(file_store)
    run = run_task(file_store, prefixes, "configured", task_name, _F_WN="pod-3")
    assert run.returncode == 0, run.stderr
    names = list_names(file_store, prefixes.output)
    assert len(_per_worker_files(names)) == int(per_worker)
    assert ("error.pb" in names) == shared
    (name,) = names
    error = read_error(file_store, f"{prefixes.output}/{name}")
    assert (error.worker, _time(error)) == ("pod-3", EXACT_TIME)  # stamped either way


def test_configured_task_success_writes_outputs_only(file_store: ObjectStore) -> None:
    prefixes = new_prefixes(file_store, x=41)
    run = run_task(file_store, prefixes, "configured", "succeed", _F_DES="earliest")
    assert run.returncode == 0, run.stderr
    assert list_names(file_store, prefixes.output) == ["outputs.pb"]
    assert read_outputs(file_store, prefixes.output).literals["o0"].scalar.primitive.integer == 42


def _normalized_names(names: list[str]) -> list[str]:
    return sorted(re.sub(r"[0-9a-f]{32}", "<uuid>", name) for name in names)


def _same_error(ours: errors_pb2.ContainerError, theirs: errors_pb2.ContainerError) -> None:
    """Every field flytekit decides is the same; the time is flytekit's float time, not ours."""
    assert (ours.code, ours.kind, ours.origin, ours.worker) == (theirs.code, theirs.kind, theirs.origin, theirs.worker)
    assert ours.message == theirs.message


@pytest.mark.parametrize("task_name", ["add_one", "fail_value_error", "fail_recoverable"])
def test_plain_task_behaves_exactly_like_pyflyte_execute(file_store: ObjectStore, task_name: str) -> None:
    ours_prefixes, theirs_prefixes = new_prefixes(file_store, name="ours"), new_prefixes(file_store, name="theirs")
    ours = run_task(file_store, ours_prefixes, "plain", task_name)
    theirs = run_task(file_store, theirs_prefixes, "plain", task_name, script=FLYTEKIT_EXECUTE)
    assert ours.returncode == theirs.returncode == 0, ours.stderr + theirs.stderr
    assert ours.stdout == theirs.stdout

    names = list_names(file_store, ours_prefixes.output)
    assert names == list_names(file_store, theirs_prefixes.output)
    for name in names:
        ours_bytes = read_bytes(file_store, f"{ours_prefixes.output}/{name}")
        theirs_bytes = read_bytes(file_store, f"{theirs_prefixes.output}/{name}")
        if name == "outputs.pb":
            assert ours_bytes == theirs_bytes
        else:
            ours_error = read_error(file_store, f"{ours_prefixes.output}/{name}")
            theirs_error = read_error(file_store, f"{theirs_prefixes.output}/{name}")
            _same_error(ours_error, theirs_error)
            assert ours_error.worker == ""  # flytekit's: no worker name without a strategy


@pytest.mark.parametrize("fail_on_error", ["", "true"])
def test_plain_task_under_aggregation_keeps_flytekits_fields_and_exit_code(
    file_store: ObjectStore, fail_on_error: str
) -> None:
    env = {"_F_DES": "earliest", "_F_WN": "pod-9", "FLYTE_FAIL_ON_ERROR": fail_on_error}
    ours_prefixes, theirs_prefixes = new_prefixes(file_store, name="ours"), new_prefixes(file_store, name="theirs")
    ours = run_task(file_store, ours_prefixes, "plain", "fail_value_error", **env)
    theirs = run_task(file_store, theirs_prefixes, "plain", "fail_value_error", script=FLYTEKIT_EXECUTE, **env)
    assert ours.returncode == theirs.returncode == (1 if fail_on_error else 0)

    (ours_name,) = list_names(file_store, ours_prefixes.output)
    (theirs_name,) = list_names(file_store, theirs_prefixes.output)
    assert FLYTEKIT_PER_POD.fullmatch(theirs_name)
    assert PER_WORKER.fullmatch(ours_name) and ours_name.startswith("error-pod-9-")
    # a plain error's key is derived from what flytekit stamped: its own message and time
    assert _named_as_read(file_store, ours_prefixes.output, ours_name).role == Role.CANDIDATE
    _same_error(
        read_error(file_store, f"{ours_prefixes.output}/{ours_name}"),
        read_error(file_store, f"{theirs_prefixes.output}/{theirs_name}"),
    )


def _assert_clean_failure(run_stderr: str, returncode: int, expected_paths: list[str]) -> None:
    assert returncode == WRITE_FAILED_EXIT_CODE
    ours = [line for line in run_stderr.splitlines() if line.startswith(f"{PATCHED_ENTRYPOINT}: ")]
    assert len(ours) == len(expected_paths)
    for line, path in zip(ours, expected_paths, strict=True):
        assert line.startswith(f"{PATCHED_ENTRYPOINT}: could not write error document {path}")
    # Nothing of ours raised past the command. (On gs, gcsfs prints a traceback of its own at
    # interpreter exit, closing an aiohttp session on the wrong loop; pyflyte-execute does the same.)
    after_task_error = run_stderr.split("!! End Error Captured by Flyte !!")[-1]
    assert "flytekitplugins_rootcause" not in after_task_error
    assert "ErrorDocumentWriteError" not in after_task_error


def test_unwritable_local_prefix_fails_the_pod_with_one_clear_line(file_store: ObjectStore, tmp_path: Path) -> None:
    prefixes = new_prefixes(file_store)
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"")
    unwritable = Prefixes(prefixes.inputs, str(blocker / "out"), prefixes.raw_output)
    run = run_task(file_store, unwritable, "plain", "fail_root_cause", _F_DES="earliest", _F_WN="pod-1")
    _assert_clean_failure(run.stderr, run.returncode, [f"{blocker}/out/error-pod-1-"])
    assert "NotADirectoryError" in run.stderr


@pytest.mark.parametrize(
    ("fixture", "module", "task_name", "files"),
    [
        ("gcs_store", "configured", "root_cause", ["error-pod-1-", "error.pb"]),
        ("s3_store", "plain", "fail_root_cause", ["error-pod-1-"]),
    ],
)
def test_store_refusing_the_write_fails_the_pod_with_clear_lines(
    fixture: str, module: str, task_name: str, files: list[str], request: pytest.FixtureRequest
) -> None:
    store: ObjectStore = request.getfixturevalue(fixture)
    prefixes = new_prefixes(store)
    refused = f"{store.protocol}://no-such-bucket-rootcause/run/out"
    run = run_task(
        store,
        Prefixes(prefixes.inputs, refused, prefixes.raw_output),
        module,
        task_name,
        _F_DES="earliest",
        _F_WN="pod-1",
    )
    _assert_clean_failure(run.stderr, run.returncode, [f"{refused}/{name}" for name in files])
    assert "bucket or parent folder does not exist" in run.stderr


@pytest.mark.parametrize("fixture", ["file_store", "gcs_store"])
def test_hostile_worker_name_cannot_escape_the_prefix(fixture: str, request: pytest.FixtureRequest) -> None:
    store: ObjectStore = request.getfixturevalue(fixture)
    prefixes = new_prefixes(store)
    hostile = "../../escaped/..\x1b[2J\nname"
    run = run_task(store, prefixes, "plain", "fail_root_cause", _F_DES="earliest", _F_WN=hostile)
    assert run.returncode == 0, run.stderr

    run_root = prefixes.output.rsplit("/", 1)[0]
    assert list_names(store, run_root) == ["inputs.pb", "out"]  # nothing landed beside or above
    (match,) = _per_worker_files(list_names(store, prefixes.output))
    assert match.group("worker") == "_escaped_2J_name"
    error = read_error(store, f"{prefixes.output}/{match.group(0)}")
    assert error.worker == "../../escaped/..[2Jname"  # as given, minus control characters
