"""Error documents reach a store that throttles, and the pod's exit status says what Flyte can read.

A fault-injecting proxy (``testbed/flaky_store.py``) stands in front of moto's S3 server and answers
429 or 503 to the first writes, as S3 does when every pod of a failing job writes at once; s3fs,
configured by flytekit as in a pod, writes through it. botocore's own retries are turned off
(``AWS_MAX_ATTEMPTS=1``) so that each try of ours is one request the proxy counts; s3fs's own
retries of ``SlowDown`` stay on, as in a pod. Then the real entrypoint, as a subprocess: a pod
whose own document was written exits 0 even though its ``error.pb`` was refused.

The error shapes the retry loop classifies are made here by the real clients' own code (s3fs's
translation of botocore's error, gcsfs's response check, botocore's and requests' exceptions).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import obstore.exceptions
import pytest
import requests.exceptions
from botocore.exceptions import ConnectionClosedError, EndpointConnectionError, ReadTimeoutError
from gcsfs.retry import validate_response

from flytekitplugins_rootcause.entrypoint.error_upload import (
    ErrorDocumentWriteError,
    WriteOutcome,
    write_error_documents,
)
from flytekitplugins_rootcause.upstream.flytekit_entrypoint import PATCHED_ENTRYPOINT
from rootcause_core import store_retry
from rootcause_core.store_retry import is_transient_store_error, store_answer
from rootcause_core.testimony import LostPod
from testbed.flaky_store import Fault, FlakyProxy, flaky_proxy
from testbed.object_stores import ObjectStore
from tests.entrypoint_tasks.harness import flytekit_file_access, list_names, new_prefixes, read_bytes, run_task
from tests.flytekitplugins_rootcause.entrypoint.test_error_documents_lost_pod import (
    LAST_SEEN_NS,
    PER_WORKER,
    victim_document,
)
from tests.flytekitplugins_rootcause.entrypoint.test_error_upload import BOTH, _s3_error

#: The writes of error documents: the per-worker files and ``error.pb`` (not ``inputs.pb``).
ERROR_FILES = r"/error[^/]*\.pb$"
ERROR_PB = r"/error\.pb$"


def _gcsfs_error(status: int) -> BaseException:
    """What gcsfs raises for a response with ``status`` (its own check of every response)."""
    try:
        validate_response(status, b'{"error": {"message": "injected"}}', "https://storage/b/o")
    except Exception as error:
        return error
    raise AssertionError(f"gcsfs accepted status {status}")


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (_s3_error("SlowDown", 503), True),
        (_s3_error("ServiceUnavailable", 503), True),
        (_s3_error("InternalError", 500), True),
        (_s3_error("RequestTimeout", 400), True),
        (_s3_error("TooManyRequests", 429), True),
        (_s3_error("ConditionalRequestConflict", 409), True),
        (_s3_error("AccessDenied", 403), False),
        (_s3_error("NoSuchBucket", 404), False),
        (_s3_error("PreconditionFailed", 412), False),
        (_gcsfs_error(429), True),
        (_gcsfs_error(500), True),
        (_gcsfs_error(502), True),  # gcsfs raises requests' ProxyError
        (_gcsfs_error(503), True),
        (_gcsfs_error(504), True),
        (_gcsfs_error(401), False),
        (_gcsfs_error(403), False),
        (_gcsfs_error(404), False),
        (_gcsfs_error(412), False),  # FileExistsError: another pod created error.pb first
        (ReadTimeoutError(endpoint_url="http://store"), True),
        (ConnectionClosedError(endpoint_url="http://store"), True),
        (EndpointConnectionError(endpoint_url="http://store"), True),
        (requests.exceptions.ConnectionError("reset"), True),
        (obstore.exceptions.GenericError("Server returned non-2xx status code: 503 Service Unavailable"), True),
        (obstore.exceptions.PermissionDeniedError("denied"), False),
    ],
    ids=lambda value: value if isinstance(value, bool) else f"{type(value).__name__}:{str(value)[:40]}",
)
def test_the_clients_errors_are_classified_by_the_stores_answer(error: BaseException, transient: bool) -> None:
    assert is_transient_store_error(error) is transient


def test_the_stores_answer_is_named_for_the_log() -> None:
    assert store_answer(_s3_error("SlowDown", 503)) == "HTTP 503 SlowDown"
    assert store_answer(_gcsfs_error(429)) == "HTTP 429"
    assert store_answer(FileNotFoundError("x")) is None


@pytest.fixture()
def flaky(s3_store: ObjectStore, monkeypatch: pytest.MonkeyPatch) -> Iterator[FlakyProxy]:
    """moto's S3 server behind the proxy; botocore's retries off (read when s3fs builds its client)."""
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    monkeypatch.setenv("AWS_RETRY_MODE", "standard")
    with flaky_proxy(s3_store.storage_options["endpoint_url"]) as proxy:
        yield proxy


def _write(
    flaky: FlakyProxy, s3_store: ObjectStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[str, WriteOutcome]:
    """``write_error_documents`` of ``b"doc"`` for ``pod-0`` through the proxy, both files."""
    prefix = f"{s3_store.new_prefix('flaky')}/out"
    file_access = flytekit_file_access(tmp_path, flaky.store(s3_store), monkeypatch)
    return prefix, write_error_documents(prefix, b"doc", "pod-0", None, BOTH, file_access)


@pytest.mark.parametrize("status", [503, 429])
def test_the_document_lands_after_the_store_said_not_now(
    status: int, flaky: FlakyProxy, s3_store: ObjectStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fault = Fault(status, count=3, path=ERROR_FILES)
    flaky.set_faults([fault])
    prefix, outcome = _write(flaky, s3_store, tmp_path, monkeypatch)
    assert outcome.failures == () and outcome.shared_created is True
    assert outcome.per_worker_path is not None and read_bytes(s3_store, outcome.per_worker_path) == b"doc"
    assert read_bytes(s3_store, f"{prefix}/error.pb") == b"doc"
    assert fault.served == 3
    assert [seen.status for seen in flaky.seen if seen.injected] == [status] * 3


def test_s3s_slow_down_is_retried_by_s3fs_and_then_by_us(
    flaky: FlakyProxy, s3_store: ObjectStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S3's own throttling answer: s3fs retries it a few times itself, then the deadline's loop goes on."""
    fault = Fault(503, count=7, path=ERROR_PB, code="SlowDown")
    flaky.set_faults([fault])
    prefix, outcome = _write(flaky, s3_store, tmp_path, monkeypatch)
    assert outcome.failures == () and outcome.shared_created is True
    assert read_bytes(s3_store, f"{prefix}/error.pb") == b"doc" and fault.served == 7


def test_a_store_that_stays_unavailable_past_the_deadline_fails_clearly_and_in_time(
    flaky: FlakyProxy, s3_store: ObjectStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_retry, "DEADLINE_S", 1.5)
    flaky.set_faults([Fault(503, path=ERROR_FILES)])
    started = time.monotonic()
    with pytest.raises(ErrorDocumentWriteError) as caught:
        _write(flaky, s3_store, tmp_path, monkeypatch)
    assert time.monotonic() - started < 1.5 + 5.0  # the deadline, plus the time to build a client
    per_worker, shared = caught.value.failures
    assert "/out/error-pod-0-" in per_worker.path and shared.path.endswith("/out/error.pb")
    # the last try starts before the deadline, bounded by the time left: its 503 may come back a few
    # milliseconds past it (2 ms seen under the suite's load), never a whole try or wait later
    assert per_worker.tries >= 2 and per_worker.elapsed_s < 1.5 + 0.25
    assert per_worker.describe().startswith(
        f"could not write error document {per_worker.path}: OSError (HTTP 503 ServiceUnavailable): "
    )
    assert per_worker.describe().endswith("no time left for another try before the 1.5 s deadline]")
    assert f"[{per_worker.tries} tries in " in per_worker.describe()
    # error.pb gets what the deadline left: a 503 too, or a request cut off when the time ran out
    assert re.match(r"OSError \(HTTP 503 ServiceUnavailable\)|TimeoutError: no answer within", shared.reason)
    assert re.search(r"(before the 1\.5 s deadline|before its turn)\]$", shared.describe())
    for failure in (per_worker, shared):
        assert "\n" not in failure.describe() and "Traceback" not in failure.describe()


def test_a_store_that_never_answers_holds_the_pod_no_longer_than_the_deadline(
    flaky: FlakyProxy, s3_store: ObjectStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_retry, "DEADLINE_S", 1.5)
    flaky.set_faults([Fault(503, path=ERROR_FILES, delay_s=60.0)])
    started = time.monotonic()
    with pytest.raises(ErrorDocumentWriteError) as caught:
        _write(flaky, s3_store, tmp_path, monkeypatch)
    assert time.monotonic() - started < 1.5 + 5.0
    per_worker, shared = caught.value.failures
    assert re.match(r"TimeoutError: no answer within the 1\.\d s left before the deadline", per_worker.reason)
    assert per_worker.tries == 1 and shared.tries == 0
    assert shared.describe().endswith("[0 tries in 0.0 s, not tried: the deadline passed before its turn]")


def test_a_refused_error_pb_beside_a_written_per_worker_file_is_reported_not_raised(
    flaky: FlakyProxy, s3_store: ObjectStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flaky.set_faults([Fault(403, path=ERROR_PB)])
    prefix, outcome = _write(flaky, s3_store, tmp_path, monkeypatch)
    assert outcome.per_worker_path is not None and read_bytes(s3_store, outcome.per_worker_path) == b"doc"
    assert outcome.shared_created is None
    (failure,) = outcome.failures
    assert failure.path == f"{prefix}/error.pb" and failure.tries == 1
    assert failure.reason.startswith("PermissionError (HTTP 403 AccessDenied): the store refused the write")
    assert re.search(r"\[1 try in \d+\.\d s, not retried: the store's answer is final\]$", failure.describe())


def test_a_refused_lost_pod_document_does_not_undo_the_pods_own(
    flaky: FlakyProxy, s3_store: ObjectStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flaky.set_faults([Fault(403, path=r"/error-train-worker-0-")])
    plan, document = victim_document((LostPod(0, "train-worker-0", LAST_SEEN_NS),))
    prefix = f"{s3_store.new_prefix('lost')}/out"
    file_access = flytekit_file_access(tmp_path, flaky.store(s3_store), monkeypatch)
    outcome = write_error_documents(prefix, document, "train-worker-1", plan, PER_WORKER, file_access)
    (failure,) = outcome.failures
    assert failure.path.startswith(f"{prefix}/error-train-worker-0-")
    assert outcome.per_worker_path is not None and read_bytes(s3_store, outcome.per_worker_path) == document


@pytest.mark.slow
def test_a_pod_whose_own_document_was_written_exits_0_though_error_pb_was_refused(
    flaky: FlakyProxy, s3_store: ObjectStore
) -> None:
    """The exit-0 contract: a non-zero exit fails the PyTorchJob, and Flyte reads no error document of
    a failed job; the refused ``error.pb`` is one line in the log, the per-worker file is there."""
    flaky.set_faults([Fault(403, path=ERROR_PB)])
    store = flaky.store(s3_store)
    prefixes = new_prefixes(store)
    run = run_task(store, prefixes, "configured", "root_cause", _F_DES="earliest", _F_WN="pod-1")
    assert run.returncode == 0, run.stderr[-3000:]
    ours = [line for line in run.stderr.splitlines() if line.startswith(f"{PATCHED_ENTRYPOINT}: ")]
    (line,) = ours
    assert line.startswith(
        f"{PATCHED_ENTRYPOINT}: could not write error document {prefixes.output}/error.pb: PermissionError "
        "(HTTP 403 AccessDenied): the store refused the write (injected by the flaky store: 403) [1 try in "
    )
    assert line.endswith(" s, not retried: the store's answer is final]")
    names = list_names(s3_store, prefixes.output)
    assert len(names) == 1 and names[0].startswith("error-pod-1-")
    assert "ErrorDocumentWriteError" not in run.stderr
