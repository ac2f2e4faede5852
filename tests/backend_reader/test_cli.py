"""``rootcause-reader`` as a real subprocess: exit codes, the JSON shape, proto and table output."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from flyteidl.core import execution_pb2

from backend_reader.documents import listing_key_for
from rootcause_core.error_files import keyed_file_name
from testbed.object_stores import ObjectStore
from testbed.reader_support import BASE_NS, error_document, write_files

pytestmark = pytest.mark.slow

CLI = str(Path(sys.executable).with_name("rootcause-reader"))
RFC3339_NS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z$")


def run_cli(store: ObjectStore, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, **store.env, "COLUMNS": "220"}  # a wide table: one row per line
    return subprocess.run([CLI, "read", *args], capture_output=True, env=env, timeout=120)


ROOT_CAUSE = error_document("[root cause] ValueError: bad shard", worker="a")
VICTIM = error_document("[victim] SIGTERM", worker="b", timestamp_ns=BASE_NS - 5)
# Named as the plugin names them (role and time in the name), so --format proto reads by name.
ROOT_CAUSE_NAME = keyed_file_name("error-a-1", listing_key_for(ROOT_CAUSE))


def write_failed_task(store: ObjectStore) -> str:
    """A root cause, a victim, an old untimed file and a corrupt file; returns the prefix."""
    prefix = store.new_prefix("cli")
    files = [
        (f"{prefix}/{ROOT_CAUSE_NAME}", ROOT_CAUSE),
        (f"{prefix}/{keyed_file_name('error-b-2', listing_key_for(VICTIM))}", VICTIM),
        (f"{prefix}/error-old.pb", error_document("RuntimeError", worker=None, timestamp_ns=None)),
        (f"{prefix}/error-bad.pb", b"\x0a"),
    ]
    write_files(store.protocol, store.storage_options, files)
    return prefix


def test_json_output(any_store: ObjectStore) -> None:
    failed_task = write_failed_task(any_store)
    done = run_cli(any_store, failed_task, "--format", "json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert set(out) == {"is_error", "error", "failures", "skipped"}
    assert out["is_error"] is True
    error = out["error"]
    assert set(error) == {"code", "message", "kind", "worker", "timestamp", "error_uri", "is_recoverable"}
    assert (error["worker"], error["kind"], error["is_recoverable"]) == ("a", "USER", False)
    assert error["error_uri"] == f"{failed_task}/{ROOT_CAUSE_NAME}" and RFC3339_NS.match(error["timestamp"])
    roles = [(f["worker"], f["role"]) for f in out["failures"]]
    assert roles == [("a", "root-cause"), ("", "candidate"), ("b", "victim")]
    for failure in out["failures"]:
        assert set(failure) == {"worker", "timestamp", "code", "kind", "is_recoverable", "role", "error_uri"}
        assert failure["timestamp"] is None or RFC3339_NS.match(failure["timestamp"])
    assert [s["error_uri"] for s in out["skipped"]] == [f"{failed_task}/error-bad.pb"]


def test_proto_output_is_the_execution_error(file_store: ObjectStore) -> None:
    failed_task = write_failed_task(file_store)
    done = run_cli(file_store, failed_task, "--format", "proto")
    assert done.returncode == 0, done.stderr
    error = execution_pb2.ExecutionError()
    error.ParseFromString(done.stdout)
    assert error.worker == "a" and error.message.startswith("[root cause] ValueError")
    assert error.error_uri == f"{failed_task}/{ROOT_CAUSE_NAME}"
    assert error.timestamp.seconds * 10**9 + error.timestamp.nanos == BASE_NS


def test_table_marks_the_root_cause_and_lists_skipped_files(file_store: ObjectStore) -> None:
    failed_task = write_failed_task(file_store)
    done = run_cli(file_store, failed_task)
    assert done.returncode == 0, done.stderr
    text = done.stdout.decode()
    assert "★ root cause" in text and "Skipped error files" in text and "error-bad.pb" in text
    assert "[root cause]" in text and "[victim]" in text  # messages shown as written, not as markup


def test_no_error_is_still_exit_0(file_store: ObjectStore) -> None:
    done = run_cli(file_store, file_store.new_prefix("ok"), "--format", "json")
    assert done.returncode == 0
    assert json.loads(done.stdout) == {"is_error": False, "error": None, "failures": [], "skipped": []}


@pytest.mark.parametrize(
    "args",
    [
        ["--format", "yaml"],
        ["--strategy", "latest"],
        ["--expected-workers", "0"],
        ["--settle-timeout", "-1"],
        ["--max-payload-bytes", "zero"],
        ["-o", "no-equals-sign"],
    ],
)
def test_usage_errors_exit_2(file_store: ObjectStore, args: list[str]) -> None:
    done = run_cli(file_store, file_store.root, *args)
    assert done.returncode == 2
    assert b"Traceback" not in done.stderr


def test_missing_bucket_exits_1_with_one_line(gcs_store: ObjectStore) -> None:
    done = run_cli(gcs_store, "gs://no-such-bucket-cli/out", "--format", "json")
    assert done.returncode == 1
    assert done.stdout == b""
    lines = done.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "no-such-bucket-cli" in lines[0] and "does not exist" in lines[0]
