"""32 pods fail at the same moment: 32 distinct error files, and one error.pb, the first writer's.

The writers are 32 real entrypoint processes (``tests/entrypoint_tasks/fork_writers.py`` explains
why they are forked from one process that did the imports): each parses the pod's command line,
sets up flytekit, downloads its inputs from the store and runs its task, which blocks on a shared
barrier and, once all 32 are there, raises at the same instant. The uploads then race for real
against the store under test.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from flyteidl.core import errors_pb2

from tests.entrypoint_tasks.harness import REPO_ROOT, Run, command, list_names, new_prefixes, pod_env, read_bytes
from tests.object_stores import ObjectStore
from tests.reader_support import per_worker_name_pattern

pytestmark = pytest.mark.slow

WRITERS = 32
PER_WORKER = per_worker_name_pattern(r"writer-\d\d")


def test_concurrent_writers_leave_every_file_and_the_first_error_pb(any_store: ObjectStore, tmp_path: Path) -> None:
    prefixes = new_prefixes(any_store)
    args = command("unused", prefixes, "tests.entrypoint_tasks.configured", "root_cause_after_barrier")[1:]
    launcher = [sys.executable, "-m", "tests.entrypoint_tasks.fork_writers", str(WRITERS)]
    launcher += [str(tmp_path / "barrier"), str(tmp_path / "logs"), "--", *args]
    completed = subprocess.run(
        launcher,
        cwd=REPO_ROOT,
        env=pod_env(any_store, FLYTE_SDK_LOGGING_LEVEL="20"),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    statuses = json.loads(completed.stdout)
    workers = [f"writer-{index:02d}" for index in range(WRITERS)]
    assert statuses == dict.fromkeys(workers, 0)

    names = list_names(any_store, prefixes.output)
    per_worker = {match.group("worker"): name for name in names if (match := PER_WORKER.fullmatch(name))}
    assert sorted(per_worker) == workers  # 32 distinct files, one per writer
    assert sorted(names) == sorted([*per_worker.values(), "error.pb"])  # and nothing else

    # Exactly one writer created error.pb; every other one found it there and left it alone.
    logs = {worker: Run(0, "", (tmp_path / "logs" / f"{worker}.err").read_text()) for worker in workers}
    created = [w for w, log in logs.items() if any(m.startswith("Created ") for m in log.log_messages())]
    left = [w for w, log in logs.items() if any(m.startswith("Left ") for m in log.log_messages())]
    assert sorted(created + left) == workers
    # (moto checks If-None-Match before it stores, without a lock, on a threaded server; real S3
    # and fake-gcs-server check and store atomically. Two winners on s3 would be that moto race.)
    assert len(created) == 1, f"{created} all created error.pb on {any_store.protocol}"
    (winner,) = created

    # error.pb is the winner's document, whole: the same bytes as the winner's own file.
    shared = read_bytes(any_store, f"{prefixes.output}/error.pb")
    assert shared == read_bytes(any_store, f"{prefixes.output}/{per_worker[winner]}")
    document = errors_pb2.ErrorDocument()
    document.ParseFromString(shared)
    assert document.error.worker == winner
