"""The Flyte 2 exceptions become the ``error.pb`` Flyte 2's runtime writes (no processes)."""

from __future__ import annotations

from pathlib import Path

from flyteidl2.core import execution_pb2

from flyteplugins.rootcause.exceptions import (
    ERROR_CODE,
    ElasticRootCauseError,
    ElasticRootCauseRecoverableError,
    root_cause_error,
)
from flyteplugins.rootcause.upstream import upload_error_document
from rootcause_core.ordering import Role
from rootcause_engine.agent.diagnosis.agreed import PodWord, agreed_report
from tests.rootcause_engine.agent.diagnosis.test_agreed import ROOT, VICTIM_0, failure


def written(error: BaseException, folder: Path) -> execution_pb2.ContainerError:
    upload_error_document(error, str(folder))
    document = execution_pb2.ErrorDocument()
    document.ParseFromString((folder / "error.pb").read_bytes())
    return document.error


def test_a_root_cause_that_is_not_recoverable_is_written_non_recoverable_with_the_agreed_message(
    tmp_path: Path,
) -> None:
    agreed = agreed_report([PodWord("pod-0", (VICTIM_0,)), PodWord("pod-1", (ROOT,))])
    error = root_cause_error(agreed)
    assert isinstance(error, ElasticRootCauseError)
    container = written(error, tmp_path)
    assert (container.code, container.kind) == (ERROR_CODE, execution_pb2.ContainerError.NON_RECOVERABLE)
    assert container.message == agreed.message
    assert container.origin == execution_pb2.ExecutionError.USER


def test_a_recoverable_root_cause_is_written_recoverable(tmp_path: Path) -> None:
    recoverable = failure("pod-1", 3, 1, Role.CANDIDATE, "x", recoverable=True)
    error = root_cause_error(agreed_report([PodWord("pod-1", (recoverable,))]))
    assert isinstance(error, ElasticRootCauseRecoverableError)
    container = written(error, tmp_path)
    assert (container.code, container.kind) == (ERROR_CODE, execution_pb2.ContainerError.RECOVERABLE)
