"""Whatever a worker raises, the root cause arrives: hostile exception texts end to end (issue #15).

Property part (fast, hypothesis): arbitrary exception types, messages (any code point: NUL and other
controls, lone surrogates, megabytes), ``__str__`` that raises, chained and grouped exceptions, and
worker names go through the real writer and reader functions: the worker's error file, the agent's
reading and ranking, the report, the pod's ``ErrorDocument`` and its file name, then
``RemoteFileOutputReader`` and the port of Flyte's Go rule. Real-process part (slow, three
launches): the three messages of the issue through ``pyflyte-rootcause-execute`` with
``_F_DES=Earliest``, one pod of two workers, then the ``rootcause-reader`` command and the Go rule.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

from backend_reader import RemoteFileOutputReader
from backend_reader.upstream_rule import earliest_error
from flytekitplugins_rootcause.entrypoint.error_documents import last_resort_document, per_worker_file_name
from flytekitplugins_rootcause.exceptions import root_cause_error
from rootcause_core.safe_text import (
    MAX_DOCUMENT_BYTES,
    MAX_REPORT_BYTES,
    MAX_WORKER_ERROR_FILE_BYTES,
    safe_text,
    utf8_size,
)
from rootcause_core.testimony import for_failure, with_testimony
from rootcause_core.worker_names import current_worker_name, display_worker_name, raw_worker_name
from rootcause_engine.agent.death_watcher import ProcessExit
from rootcause_engine.agent.diagnosis.pipeline import report_for
from rootcause_engine.agent.diagnosis.selection import rank_failures
from rootcause_engine.agent.launch_ledger import LaunchedWorker
from rootcause_engine.agent.launch_record import WorkerRecord
from rootcause_engine.worker.recorder import build_error_file, read_error_file
from testbed.object_stores import ObjectStore
from testbed.reader_support import BASE_NS, error_document
from tests.entrypoint_tasks.harness import list_names, new_prefixes, read_bytes, run_task
from tests.entrypoint_tasks.hostile import HUGE_HEAD, HUGE_TAIL

ROOT_NS = BASE_NS + 123_456_789
TEARDOWN_NS = ROOT_NS + 2_000_000
CLI = str(Path(sys.executable).with_name("rootcause-reader"))

any_text = st.text(alphabet=st.characters(exclude_categories=()), max_size=200)
huge_text = st.builds(
    lambda head, filler, size, tail: head + filler * size + tail,
    any_text,
    st.sampled_from(["x", "\x00", "é", "😀", "\udc80", "\n"]),
    st.sampled_from([1_000_000, 5_000_000]),
    any_text,
)
messages = st.one_of(any_text, any_text, any_text, huge_text)
exception_types = st.one_of(
    st.sampled_from([ValueError, RuntimeError, KeyError, OSError, FileNotFoundError, ZeroDivisionError,
                     MemoryError, RecursionError, Exception]),
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,30}", fullmatch=True).map(lambda name: type(name, (Exception,), {})),
)
shapes = st.sampled_from(["plain", "str_raises", "chained", "group"])
worker_names = st.binary(min_size=1, max_size=80).filter(lambda raw: b"\x00" not in raw).map(os.fsdecode)


def _raise_in_str(self: BaseException) -> str:
    raise RuntimeError("__str__ is broken")


def _raised(cls: type[Exception], message: str, shape: str) -> BaseException:
    """An exception of ``shape`` with a real traceback, as the worker's function would raise it."""
    if shape == "str_raises":
        cls = type(cls.__name__, (cls,), {"__str__": _raise_in_str})
    error: BaseException = cls(message)
    try:
        if shape == "group":
            raise ExceptionGroup(message, [error, ValueError(message[:100])])
        if shape == "chained":
            try:
                raise KeyError(message[:100])
            except KeyError as inner:
                raise error from inner
        raise error
    except BaseException as caught:  # the test raises on purpose
        return caught


def _pod_documents(error: BaseException, folder: Path, attempt_dir: Path) -> tuple[str, bytes]:
    """Run the worker's recorder, the agent's reading and ranking, and the entrypoint's document
    writer for a pod whose rank 1 raised ``error`` and rank 0 was torn down; returns the expected
    worker name and the pod's document, written under ``folder`` with its real file name."""
    error_file = attempt_dir / "1" / "error.json"
    error_file.parent.mkdir(parents=True)
    data = build_error_file(error, ROOT_NS)
    error_file.write_text(json.dumps(data))
    assert error_file.stat().st_size < MAX_WORKER_ERROR_FILE_BYTES
    torch_view = ProcessFailure(local_rank=1, pid=101, exitcode=1, error_file=str(error_file))  # torch reads it
    assert torch_view.message["message"].startswith(safe_text(type(error).__name__))
    evidence = [
        WorkerRecord(LaunchedWorker(0, 1, 1, 0, 101, str(error_file)), ProcessExit(101, ROOT_NS + 1000, 1, None),
                       read_error_file(str(error_file))),
        WorkerRecord(LaunchedWorker(0, 0, 0, 0, 100, str(attempt_dir / "0" / "error.json")),
                       ProcessExit(100, TEARDOWN_NS + 1000, None, 15), None),
    ]
    failures = rank_failures(evidence, signals_ns=TEARDOWN_NS, worker=current_worker_name(), host="host-a")
    assert failures[0].global_rank == 1
    worker = display_worker_name(raw_worker_name(os.environ))
    plan, document = last_resort_document(root_cause_error(report_for(failures)), worker)
    name = per_worker_file_name(raw_worker_name(os.environ), uuid.uuid4().hex, plan.listing_key)
    (folder / name).write_bytes(document)
    return worker, document


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(exception_types, messages, shapes, worker_names)
@example(ValueError, "NCCLREMOTEERROR", "plain", "\x01")  # reads like a peer's failure: a victim's document (found)
def test_any_exception_names_the_right_worker_rank_and_type(
    cls: type[Exception], message: str, shape: str, raw_worker: str
) -> None:
    error = _raised(cls, message, shape)
    env = {"RANK": "1", "LOCAL_RANK": "1", "GROUP_RANK": "0", "_F_WN": raw_worker}
    with tempfile.TemporaryDirectory(prefix="rootcause-hostile-") as tmp, mock.patch.dict(os.environ, env):
        os.environ.pop("FLYTE_INTERNAL_WORKER_NAME", None)
        folder, attempt_dir = Path(tmp, "out"), Path(tmp, "attempt_0")
        folder.mkdir()
        worker, document = _pod_documents(error, folder, attempt_dir)
        # A later victim on another pod, as every pod of this plugin writes one: stamped the victim delay
        # late, its true time in the testimony. (A message that reads like a peer's failure, e.g. one
        # naming ncclRemoteError, makes this pod's document a victim's too, stamped as late: the Go
        # rule must still name it, the earlier of two victims.)
        late = for_failure(ROOT_NS + 1_000_000_000, victim=True)
        victim = error_document(with_testimony("[victim] rank 2 on worker pod-late: killed by SIGTERM", late),
                                worker="pod-late", timestamp_ns=late.stamped_ns())
        (folder / f"error-pod-late-{uuid.uuid4().hex}.pb").write_bytes(victim)

        result = RemoteFileOutputReader(str(folder)).read_all()
        upstream = earliest_error(str(folder))

    assert len(document) < MAX_DOCUMENT_BYTES
    assert not result.skipped
    root = result.failures[0]
    assert root.worker == worker
    assert upstream is not None and upstream.worker == worker
    assert utf8_size(upstream.message) <= MAX_REPORT_BYTES
    first = root.message.split("\n", 1)[0]
    assert "rank 1 " in first and safe_text(type(error).__name__) in first and "(recorded)" in first


@pytest.mark.slow
@pytest.mark.parametrize("case", ["control", "surrogate", "huge"])
def test_issue_messages_reach_the_reader_and_the_go_rule(file_store: ObjectStore, case: str) -> None:
    """The three lost root causes of issue #15, through the real entrypoint, launch and reader."""
    prefixes = new_prefixes(file_store, x=3, name=f"hostile-{case}")
    run = run_task(file_store, prefixes, "hostile", "rank_one_raises_hostile",
                   _F_DES="Earliest", _F_WN="pod-0", ROOTCAUSE_TEST_HOSTILE=case)
    assert run.returncode == 0, run.stderr[-3000:]  # flytekit exits 0 and reports through error files
    names = [name for name in list_names(file_store, prefixes.output) if name.startswith("error")]
    assert names and all(len(read_bytes(file_store, f"{prefixes.output}/{n}")) < MAX_DOCUMENT_BYTES for n in names)

    cli = subprocess.run([CLI, "read", prefixes.output, "--format", "json"], capture_output=True, text=True,
                         timeout=240, check=False)
    assert cli.returncode == 0, cli.stderr
    answer = json.loads(cli.stdout)
    assert answer["skipped"] == [] and answer["error"]["worker"] == "pod-0"
    upstream = earliest_error(prefixes.output)
    assert upstream is not None and upstream.worker == "pod-0"
    for message in (answer["error"]["message"], upstream.message):
        first = message.split("\n", 1)[0]
        assert first.startswith("[root cause] rank 1 ") and "(recorded): ValueError: " in first
        assert "in rank_one_raises_hostile" in message  # the traceback's last frame
    expected = {
        "control": ["bad record \\x00\\x07\\x08 end"],
        "surrogate": ["half \\udc80 surrogate"],
        "huge": [HUGE_HEAD, HUGE_TAIL],
    }[case]
    first = answer["error"]["message"].split("\n", 1)[0]
    assert all(text in first for text in expected), first[:500]
