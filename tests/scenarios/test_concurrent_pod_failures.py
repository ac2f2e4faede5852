"""32 pods fail at the same moment: 32 distinct error files, and one error.pb, a creator's whole document.

The writers are 32 real entrypoint processes (``tests/entrypoint_tasks/fork_writers.py`` explains
why they are forked from one process that did the imports): each parses the pod's command line,
sets up flytekit, downloads its inputs from the store and runs its task, which blocks on a shared
barrier and, once all 32 are there, raises at the same instant. The uploads then race for real
against the store under test.

What the product guarantees depends on the store's create-if-absent. The local store (a hard
link) and fake-gcs-server (``ifGenerationMatch=0``) create atomically, like GCS and S3 themselves:
exactly one writer creates ``error.pb``. moto's S3 server checks ``If-None-Match`` before it stores,
without a lock, on a threaded server, so two racing writers can both be told they created it; there
the guarantee is that at least one did and that ``error.pb`` holds one creator's document, whole.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from flyteidl.core import errors_pb2

from testbed.object_stores import ObjectStore
from testbed.reader_support import per_worker_name_pattern
from tests.entrypoint_tasks.harness import REPO_ROOT, Run, command, list_names, new_prefixes, pod_env, read_bytes

pytestmark = pytest.mark.slow

WRITERS = 32
PER_WORKER = per_worker_name_pattern(r"writer-\d\d")
#: Stores whose create-if-absent is atomic: one creator, whatever the race.
ATOMIC_CREATE = {"file", "gs"}


def test_concurrent_writers_leave_every_file_and_one_creators_error_pb(any_store: ObjectStore, tmp_path: Path) -> None:
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

    # Every writer either created error.pb or found it there and left it alone.
    logs = {worker: Run(0, "", (tmp_path / "logs" / f"{worker}.err").read_text()) for worker in workers}
    created = [w for w, log in logs.items() if any(m.startswith("Created ") for m in log.log_messages())]
    left = [w for w, log in logs.items() if any(m.startswith("Left ") for m in log.log_messages())]
    assert sorted(created + left) == workers
    if any_store.protocol in ATOMIC_CREATE:
        assert len(created) == 1, f"{created} all created error.pb on {any_store.protocol}"
    else:  # moto: its unlocked If-None-Match check may let several in (see the module docstring)
        assert created, f"no writer created error.pb on {any_store.protocol}"

    # error.pb is one creator's document, whole: the same bytes as that creator's own file.
    shared = read_bytes(any_store, f"{prefixes.output}/error.pb")
    owners = [w for w in created if read_bytes(any_store, f"{prefixes.output}/{per_worker[w]}") == shared]
    assert len(owners) == 1, f"error.pb is not the document of exactly one of its creators {created}"
    document = errors_pb2.ErrorDocument()
    document.ParseFromString(shared)
    assert document.error.worker == owners[0]
