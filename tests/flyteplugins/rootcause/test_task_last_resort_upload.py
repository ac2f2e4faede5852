"""The agent watchdog's ``error.pb`` on Flyte 2: the runtime's own upload, retried under a deadline.

The upload is Flyte 2's (conversion and ``upload_error``, to a local folder here); what is checked is
the policy around it, the flytekit entrypoint's (``rootcause_core.store_retry``): a store that says
"not now" gets another try, a final answer does not, and every try is bounded by the time left
before the failure sink would abandon the writer.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import obstore.exceptions
import pytest
from flyteidl2.core import execution_pb2

from flyteplugins.rootcause import task
from flyteplugins.rootcause.exceptions import root_cause_error
from flyteplugins.rootcause.upstream import upload_error_document
from rootcause_core.store_retry import Deadline, GaveUp, deadline_inside
from rootcause_engine.agent.diagnosis.agreed import PodWord, agreed_report
from rootcause_engine.agent.failure_sink import DEFAULT_SINK_TIMEOUT_S
from tests.flyteplugins.rootcause.test_exceptions import written
from tests.rootcause_engine.agent.diagnosis.test_agreed import ROOT

#: What obstore raises once its own retries of a 503 are spent: text only, no status attribute.
UNAVAILABLE = obstore.exceptions.GenericError("Server returned non-2xx status code: 503 Service Unavailable")


def _error() -> BaseException:
    return root_cause_error(agreed_report([PodWord("pod-1", (ROOT,))]))


def _flaky_upload(monkeypatch: pytest.MonkeyPatch, failures: list[BaseException]) -> list[float | None]:
    """The task's upload raises ``failures`` in turn, then is the real one; returns each try's bound."""
    bounds: list[float | None] = []

    def upload(error: BaseException, output_path: str, timeout_s: float | None = None) -> None:
        bounds.append(timeout_s)
        if len(bounds) <= len(failures):
            raise failures[len(bounds) - 1]
        upload_error_document(error, output_path, timeout_s)

    monkeypatch.setattr(task, "upload_error_document", upload)
    return bounds


def test_error_pb_is_written_after_the_store_said_not_now(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bounds = _flaky_upload(monkeypatch, [UNAVAILABLE, UNAVAILABLE])
    task._upload_last_resort(_error(), str(tmp_path))
    assert (tmp_path / "error.pb").exists() and len(bounds) == 3
    assert all(bound is not None and 0 < bound <= deadline_inside(DEFAULT_SINK_TIMEOUT_S) for bound in bounds)
    assert deadline_inside(DEFAULT_SINK_TIMEOUT_S) < DEFAULT_SINK_TIMEOUT_S  # it reports before the sink gives up


def test_a_final_answer_is_reported_after_one_try(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bounds = _flaky_upload(monkeypatch, [obstore.exceptions.PermissionDeniedError("denied")])
    with pytest.raises(GaveUp) as caught:
        task._upload_last_resort(_error(), str(tmp_path))
    assert len(bounds) == 1 and caught.value.tries == 1 and not (tmp_path / "error.pb").exists()
    assert "not retried" in str(caught.value)


def test_one_bounded_try_writes_the_document_an_unbounded_one_writes(tmp_path: Path) -> None:
    bounded, unbounded = tmp_path / "bounded", tmp_path / "unbounded"
    bounded.mkdir()
    unbounded.mkdir()
    upload_error_document(_error(), str(bounded), timeout_s=10.0)
    document = execution_pb2.ErrorDocument.FromString((bounded / "error.pb").read_bytes()).error
    expected = written(_error(), unbounded)
    assert (document.code, document.kind, document.message) == (expected.code, expected.kind, expected.message)


def test_the_task_s_own_error_pb_is_retried_and_the_runtime_then_leaves_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The normal road (a failed launch, not the watchdog): the task writes ``error.pb`` itself under
    the same policy, and a0's own upload of it (one try, no deadline) is skipped for that prefix only."""
    from flyte._internal.runtime import taskrunner

    from flyteplugins.rootcause import upstream

    bounds = _flaky_upload(monkeypatch, [UNAVAILABLE])
    assert task._write_error_document(_error(), str(tmp_path), Deadline(deadline_inside(DEFAULT_SINK_TIMEOUT_S)))
    assert (tmp_path / "error.pb").exists() and len(bounds) == 2

    runtime_writes: list[str] = []

    async def runtime_upload(err: object, output_prefix: str, recoverable: bool = True) -> str:
        runtime_writes.append(output_prefix)
        return f"{output_prefix}/error.pb"

    def a0() -> None:  # what a0 does after the task raised: upload the error, for each prefix here
        for prefix in (str(tmp_path), str(tmp_path / "another-action")):
            assert asyncio.run(taskrunner.upload_error(object(), prefix)) == f"{prefix}/error.pb"

    monkeypatch.setattr(taskrunner, "upload_error", runtime_upload)
    monkeypatch.setattr("flyte._bin.runtime.main", a0)
    upstream.run_flyte_runtime()
    assert runtime_writes == [str(tmp_path / "another-action")]
    assert taskrunner.upload_error is runtime_upload  # given back after a0


def test_a_task_s_error_pb_the_store_refuses_is_left_to_the_runtime(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    bounds = _flaky_upload(monkeypatch, [obstore.exceptions.PermissionDeniedError("denied")])
    prefix = str(tmp_path / "refused")
    assert not task._write_error_document(_error(), prefix, Deadline(deadline_inside(DEFAULT_SINK_TIMEOUT_S)))
    assert len(bounds) == 1
    from flyteplugins.rootcause.upstream import _ERROR_DOCUMENTS_WRITTEN

    assert prefix not in _ERROR_DOCUMENTS_WRITTEN
