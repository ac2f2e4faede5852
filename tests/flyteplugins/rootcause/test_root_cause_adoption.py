"""Flyte 2: a pod whose report names only victims writes the ``error.pb`` another pod wrote naming the root cause.

Every failing pod of a Flyte 2 action writes the same ``error.pb``; the last writer wins. A pod that lost
the rendezvous store before the agreement holds only a victim's word, and its write must not replace
the culprit's document (``tests/scenarios/test_operator_decision.py`` runs the job where this happens:
the store's host stopped in the rendezvous). Here, with documents written by Flyte 2's own conversion
and upload (``upload_error_document``) to a local folder: which documents are taken up, that the pod's
write leaves such a document byte for byte as it was, and the bounded wait around it.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path

from flyte.errors import NonRecoverableError, RuntimeUserError
from flyteidl2.core import execution_pb2

from flyteplugins.rootcause import task
from flyteplugins.rootcause.action_outputs import MAX_ERROR_DOCUMENT_BYTES, ActionOutputs
from flyteplugins.rootcause.exceptions import AgentHungError, root_cause_error
from flyteplugins.rootcause.root_cause_adoption import (
    await_named_root_cause,
    error_to_write,
    named_root_cause,
    names_only_victims,
)
from flyteplugins.rootcause.upstream import upload_error_document
from rootcause_core.ordering import Role
from rootcause_engine.agent.diagnosis.agreed import PodWord, agreed_report
from rootcause_engine.agent.diagnosis.pipeline import Diagnosis, Trigger
from rootcause_engine.agent.diagnosis.selection import RetryRule
from tests.rootcause_engine.agent.diagnosis.test_agreed import ROOT, T0, VICTIM_0, failure

#: The store's host stopped while the pods met: what the other pod's report names, alone.
STORE_LOST = failure("pod-0", 0, T0 + 900_000_000, Role.VICTIM,
                     "the rendezvous store went away while the pods were still meeting: DistNetworkError: Broken pipe")
#: A root cause whose exception forbade a retry (Flyte 2's ``NonRecoverableError``).
REFUSED = dataclasses.replace(ROOT, retry_refused=True)


def _victims_error() -> BaseException:
    return root_cause_error(agreed_report([PodWord("pod-0", (STORE_LOST,))], retry_rule=RetryRule.UNLESS_REFUSED))


def _culprits_error(*failures: object) -> BaseException:
    words = [PodWord("pod-1", failures or (ROOT,))]  # type: ignore[arg-type]
    return root_cause_error(agreed_report(words, retry_rule=RetryRule.UNLESS_REFUSED))


def _document(folder: Path) -> bytes:
    return (folder / "error.pb").read_bytes()


def test_a_victim_s_write_leaves_the_culprit_s_error_pb_byte_for_byte(tmp_path: Path) -> None:
    upload_error_document(_culprits_error(), str(tmp_path))
    culprits = _document(tmp_path)
    error = error_to_write(_victims_error(), str(tmp_path), bound_s=5.0)
    upload_error_document(error, str(tmp_path))
    assert _document(tmp_path) == culprits


def test_a_culprit_s_non_recoverable_error_pb_stays_non_recoverable(tmp_path: Path) -> None:
    refused = root_cause_error(agreed_report([PodWord("pod-1", (REFUSED,))], retry_rule=RetryRule.UNLESS_REFUSED))
    assert isinstance(refused, NonRecoverableError)  # the fixture is what it says: Flyte 2 must not retry it
    upload_error_document(refused, str(tmp_path))
    culprits = _document(tmp_path)
    error = error_to_write(_victims_error(), str(tmp_path), bound_s=5.0)
    assert isinstance(error, NonRecoverableError)
    upload_error_document(error, str(tmp_path))
    assert _document(tmp_path) == culprits


def test_only_this_plugin_s_documents_that_name_a_root_cause_are_taken_up(tmp_path: Path) -> None:
    upload_error_document(_culprits_error(), str(tmp_path))
    named = named_root_cause(_document(tmp_path))
    assert named is not None and named.message.startswith("[root cause] rank 3 ")
    upload_error_document(_victims_error(), str(tmp_path))  # a victim's: nothing to take up
    assert named_root_cause(_document(tmp_path)) is None
    upload_error_document(RuntimeUserError("DistNetworkError", "Broken pipe"), str(tmp_path))  # upstream's, bare
    assert named_root_cause(_document(tmp_path)) is None
    hung = AgentHungError(Diagnosis(Trigger.AGENT_HUNG, (), "[root cause] the agent hung", True))
    upload_error_document(hung, str(tmp_path))  # ours, but no agreed root cause
    assert named_root_cause(_document(tmp_path)) is None
    for garbage in (b"", b"\xff" * 64, _document(tmp_path)[:7]):
        assert named_root_cause(garbage) is None


def test_a_report_naming_a_root_cause_or_a_lost_pod_is_written_as_it_is(tmp_path: Path) -> None:
    """Only a report naming victims waits: the culprit's own pod never looks at ``error.pb``."""
    upload_error_document(_culprits_error(), str(tmp_path))
    own = _culprits_error(ROOT, VICTIM_0)
    started = time.monotonic()
    assert error_to_write(own, str(tmp_path), bound_s=30.0) is own
    assert error_to_write(ValueError("not a report"), str(tmp_path), bound_s=30.0).__class__ is ValueError
    assert time.monotonic() - started < 30.0
    assert names_only_victims(str(_victims_error())) and not names_only_victims(str(own))


def test_a_victim_waits_for_the_culprit_s_error_pb_and_writes_its_own_only_when_none_came(tmp_path: Path) -> None:
    def culprit_writes_later() -> None:
        time.sleep(0.5)
        upload_error_document(_culprits_error(), str(tmp_path))

    writer = threading.Thread(target=culprit_writes_later)
    writer.start()
    error = error_to_write(_victims_error(), str(tmp_path), bound_s=60.0)
    writer.join()
    assert isinstance(error, RuntimeUserError) and str(error).startswith("[root cause] rank 3 ")

    alone = tmp_path / "alone"
    alone.mkdir()
    own = _victims_error()
    assert error_to_write(own, str(alone), bound_s=0.3) is own


def test_a_look_that_fails_or_finds_a_partial_write_is_looked_at_again(tmp_path: Path) -> None:
    upload_error_document(_culprits_error(), str(tmp_path))
    whole = _document(tmp_path)
    looks: list[float] = []

    def read() -> bytes | None:
        looks.append(time.monotonic())
        if len(looks) == 1:
            raise OSError("503 Service Unavailable")
        return whole[: len(whole) // 2] if len(looks) == 2 else whole

    named = await_named_root_cause(read, bound_s=60.0, poll_s=0.01)
    assert named is not None and len(looks) == 3


def test_a_document_too_large_to_be_ours_is_not_read(tmp_path: Path) -> None:
    (tmp_path / "error.pb").write_bytes(b"\0" * (MAX_ERROR_DOCUMENT_BYTES + 1))
    assert ActionOutputs(str(tmp_path)).error_document() is None
    (tmp_path / "error.pb").unlink()
    assert ActionOutputs(str(tmp_path)).error_document() is None


def test_the_agent_watchdog_s_last_resort_takes_the_same_road(tmp_path: Path) -> None:
    upload_error_document(_culprits_error(), str(tmp_path))
    culprits = _document(tmp_path)
    task._upload_last_resort(_victims_error(), str(tmp_path))
    assert _document(tmp_path) == culprits


def test_the_error_document_kind_is_what_the_backend_reads(tmp_path: Path) -> None:
    upload_error_document(_culprits_error(ROOT), str(tmp_path))
    document = execution_pb2.ErrorDocument()
    document.ParseFromString(_document(tmp_path))
    named = named_root_cause(_document(tmp_path))
    assert named is not None
    assert (document.error.kind == execution_pb2.ContainerError.RECOVERABLE) == named.recoverable
