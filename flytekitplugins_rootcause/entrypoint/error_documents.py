"""What the patched entrypoint writes on failure, decided without any I/O.

A failing pod must decide which files to write, their names, stamps and messages. flytekit's hooks,
the upload and the watchdog all ask. If each derived its answer, they could disagree. So one
:class:`ErrorDocumentPlan` is made once from the exception, and all of them answer from it. The
file's listing key is the reader's own rule, applied to the very message and stamp the plan writes.
So the name agrees with what the reader will parse, and the pod never parses its own bytes. This
package needs nothing of ``backend_reader``. ``docs/entrypoint.md`` lists what the plan holds.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from flyteidl.core import errors_pb2, execution_pb2
from flytekit.exceptions.base import FlyteException
from flytekit.exceptions.system import FlyteSystemException
from flytekit.exceptions.user import FlyteRecoverableException, FlyteUserRuntimeException
from google.protobuf.timestamp_pb2 import Timestamp

from flytekitplugins_rootcause.exceptions import RootCauseDetails
from rootcause_core.error_files import ListingKey, keyed_file_name, listing_key_for_container, per_worker_stem
from rootcause_core.ordering import Role
from rootcause_core.roles import LOST_LINK_MARKER, role_from_marker, role_marker
from rootcause_core.safe_text import MAX_REPORT_BYTES, bounded_text, exception_summary, safe_line
from rootcause_core.testimony import (
    LostPod,
    Member,
    PodTestimony,
    describe_lost_pod,
    for_failure,
    for_lost_pod,
    with_testimony,
)
from rootcause_core.timestamps import to_protobuf
from rootcause_core.worker_names import display_worker_name, sanitize_worker_name

if TYPE_CHECKING:  # the config module imports kfpytorch and torch; the entrypoint must not need them
    from flytekitplugins_rootcause.config import ElasticRootCause

#: Environment variables the backend sets when it aggregates ``error*.pb`` files (same as flytekit).
DIST_ERROR_STRATEGY_ENV_VARS: tuple[str, ...] = ("FLYTE_INTERNAL_DIST_ERROR_STRATEGY", "_F_DES")



@dataclasses.dataclass(frozen=True)
class ErrorFilePolicy:
    """Which error files a failing pod writes.

    ``per_worker_files``: one ``error-<worker>-<uuid>.<listing key>.pb`` per pod (never overwritten).
    ``error_pb_if_absent``: also create ``error.pb`` unless a pod already did, so backends that read
    only ``error.pb`` see the first writer's error rather than the last one's.
    Neither: flytekit's own behaviour, untouched (one ``error.pb``, last writer wins).
    """

    per_worker_files: bool
    error_pb_if_absent: bool

    @property
    def is_flytekit_default(self) -> bool:
        return not (self.per_worker_files or self.error_pb_if_absent)


def decide_policy(dist_error_strategy: str, config: ElasticRootCause | None) -> ErrorFilePolicy:
    """Per-worker files when the backend asks (any non-empty strategy) or the task's config does.

    ``config`` is the task's ``ElasticRootCause`` config, ``None`` for any other task. Only that
    config turns anything on by itself, so a plain ``@task`` run by the patched entrypoint behaves
    exactly like ``pyflyte-execute``: with no strategy it writes flytekit's ``error.pb``; with a
    strategy, one per-worker file and no shared copy (the backend aggregates).
    """
    per_worker = bool(dist_error_strategy) or (config is not None and config.per_worker_error_files)
    if_absent = config is not None and config.error_pb_if_absent
    return ErrorFilePolicy(per_worker_files=per_worker, error_pb_if_absent=if_absent)


def per_worker_file_name(worker: str, token: str, key: ListingKey | None) -> str:
    """``error-<sanitized worker>-<token>.<listing key>.pb``: the file of a document written for ``worker``.

    ``token`` is a fresh uuid hex per write. The name starts with ``error`` and ends with ``.pb``,
    the pattern Flyte's aggregating reader lists; the listing key (a plan's: role and time, as the
    reader will parse them from the document) lets ``backend_reader`` skip downloading files that
    cannot be the root cause. Without a key (a time the reader would refuse, or a document nothing
    is known of) the file gets a plain name and is simply read.
    """
    return keyed_file_name(per_worker_stem(worker, token), key)


@dataclasses.dataclass(frozen=True)
class ErrorDocumentPlan:
    """What this pod writes for one exception, decided once, from the exception.

    ``message`` and ``timestamp`` go into the document's ``ContainerError`` (flytekit adds code,
    kind, origin and worker); ``listing_key`` is what the reader will parse from that document,
    derived from those two fields when the plan is made, so it cannot disagree with them;
    ``testimony`` is the pod's (root-cause errors only); ``lost_pod_documents`` are the documents
    written for the peers the pod found lost. The plan holds no serialized copy of the pod's own
    document: flytekit serializes it, and the upload writes those bytes under this plan's name.
    """

    message: str
    timestamp: Timestamp = dataclasses.field(hash=False)  # a protobuf message: compared, never hashed
    testimony: PodTestimony | None = None
    lost_pod_documents: tuple[LostPodDocument, ...] = ()
    #: the pod whose document should decide what the console shows, when the failing pods agreed it is
    #: another pod than this one (an earlier, independent failure there): this pod waits for it
    defers_to: str | None = None
    listing_key: ListingKey | None = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "listing_key", listing_key_for_container(self.message, self.timestamp))


@dataclasses.dataclass(frozen=True)
class LostPodDocument:
    """A document this pod writes for a peer it found lost: the peer's name (its file is named for
    it, as the peer would have named its own), the document's plan, and the serialized document."""

    worker: str
    plan: ErrorDocumentPlan
    data: bytes


def carried_root_cause(exc: BaseException | None) -> RootCauseDetails | None:
    """The ``ElasticRootCause*Error`` behind ``exc``: itself, or the value a Flyte user error wraps."""
    if isinstance(exc, RootCauseDetails):
        return exc
    if isinstance(exc, FlyteUserRuntimeException) and isinstance(exc.value, RootCauseDetails):
        return exc.value
    return None


def testimony(error: RootCauseDetails) -> PodTestimony:
    """What this pod testifies: its root cause's true time, a victim's stamp delay, the attempt's
    members and the peers it found lost."""
    return for_failure(
        error.timestamp_ns,
        victim=error.root_cause.role == Role.VICTIM,
        members=error.members,
        lost=error.lost_pods,
    )


def plan_root_cause(
    error: RootCauseDetails, worker: str, fallback_timestamp: Callable[[], Timestamp]
) -> ErrorDocumentPlan:
    """The plan for an ``ElasticRootCause*Error``, made from the exception alone.

    The message is the report, which is what a person needs: its first line names the root cause
    behind the role marker (which readers parse, ``rootcause_core.roles``), then comes the root
    cause's own traceback and one line per other failure. flytekit's text would open with the
    agent's internal traceback instead. A report without a marker (an error built by hand) gets
    one; its last line is the pod's testimony (:func:`_testified`). The stamp is the testimony's
    (the root cause's time, a victim's moved by its stamp delay), or ``fallback_timestamp()``
    (flytekit's own) when the error carries no time. ``worker`` is the document's ``worker``: the
    documents written for lost pods name it as their reporter.
    """
    said = testimony(error)
    report = error.report
    if role_from_marker(report.splitlines()[0] if report else "") is None:
        report = f"{role_marker(error.root_cause.role)} {report}"
    stamped = said.stamped_ns()
    noticed = said.failed_at_ns if said.failed_at_ns is not None else time.time_ns()
    return ErrorDocumentPlan(
        message=_testified(report, said),
        timestamp=fallback_timestamp() if stamped is None else to_protobuf(stamped),
        testimony=said,
        lost_pod_documents=lost_pod_documents(error.lost_pods, error.members, noticed_ns=noticed, reporter=worker),
        defers_to=_agreed_elsewhere(error, worker),
    )


def _agreed_elsewhere(error: RootCauseDetails, worker: str) -> str | None:
    """The pod the failing pods agreed holds the job's root cause, if it is not this one (``worker``)."""
    agreed = getattr(error, "agreed_worker", None)
    if not isinstance(agreed, str) or not agreed or sanitize_worker_name(agreed) == sanitize_worker_name(worker):
        return None
    return agreed


def plan_flytekit_error(message: str, timestamp: Timestamp) -> ErrorDocumentPlan:
    """The plan for any other error: flytekit's own message (made safe and bounded, as every
    message) and flytekit's own stamp; no testimony, no lost pods.

    Its listing key follows from those two like any document's: the role from the message (a role
    marker if the text holds one, else the reader's text patterns for unmarked messages, so a
    user's ``connection reset by peer`` reads as a victim on both sides), the time from the stamp.
    """
    return ErrorDocumentPlan(message=bounded_text(message, MAX_REPORT_BYTES), timestamp=timestamp)


#: ``ContainerError.code`` of a document written for a lost pod (flytekit's ``ORIGIN:Name`` form).
LOST_POD_CODE = "SYSTEM:LostPod"


def lost_pod_documents(
    lost: Sequence[LostPod], members: Sequence[Member], *, noticed_ns: int, reporter: str
) -> tuple[LostPodDocument, ...]:
    """For each peer in ``lost`` (an exception's ``lost_pods``): a document for it.

    A lost pod writes nothing, so its peers write for it (``rootcause_core.testimony``): the
    document's ``worker`` is the lost pod, its message says what is known (``[lost pod]`` marker
    first), its kind is recoverable and its origin the system (a lost node is nobody's code), and it
    is stamped ``LOST_POD_STAMP_DELAY_NS`` after ``noticed_ns``, the moment the peers lost it.
    The message is made safe and bounded like any other: a peer's name comes from another pod's
    environment, and one lone surrogate in it would make protobuf refuse the document.
    """
    documents = []
    for peer in lost:
        said = for_lost_pod(peer, noticed_ns=noticed_ns, reported_by=reporter, members=tuple(members))
        described = describe_lost_pod(peer, noticed_ns=noticed_ns, reported_by=reporter)
        marker = role_marker(Role.LOST_POD) if peer.link_with is None else LOST_LINK_MARKER
        plan = ErrorDocumentPlan(
            message=_testified(f"{marker} {described}", said),
            timestamp=to_protobuf(said.stamped_ns() or noticed_ns),
            testimony=said,
        )
        container = errors_pb2.ContainerError(
            code=LOST_POD_CODE,
            message=plan.message,
            kind=errors_pb2.ContainerError.RECOVERABLE,
            origin=execution_pb2.ExecutionError.SYSTEM,
            timestamp=plan.timestamp,
            worker=display_worker_name(peer.named()),
        )
        data = errors_pb2.ErrorDocument(error=container).SerializeToString()
        documents.append(LostPodDocument(peer.worker, plan, data))
    return tuple(documents)


def _testified(report: str, said: PodTestimony) -> str:
    """``report``, made safe and cut to leave room, then the testimony line: within ``MAX_REPORT_BYTES``
    in all, and the testimony survives any cut (it is the line readers parse)."""
    return with_testimony(bounded_text(report, MAX_REPORT_BYTES - len(said.line()) - 1), said)


class ErrorDocumentPlanner:
    """flytekit's error-document hooks for one task run, answered from one plan per exception.

    flytekit's ``_dispatch_execute`` asks for the document's message (``get_traceback_str``) and its
    stamp (``get_container_error_timestamp``) in two calls, passing the Flyte wrapper to one and the
    exception it wraps to the other. For a root-cause error the plan is made at the first of them
    and kept for that exception (by identity), so the second answers from the same plan. For any
    other error flytekit's own message and stamp are kept as they pass through, and
    :meth:`staged_plan` makes the plan of both.
    """

    def __init__(
        self,
        worker: str,
        *,
        flytekit_message: Callable[[Exception], str],
        flytekit_timestamp: Callable[[Exception | None], Timestamp],
    ) -> None:
        """``worker``: the document's ``worker``; the callables: flytekit's own hooks."""
        self._worker = worker
        self._flytekit_message = flytekit_message
        self._flytekit_timestamp = flytekit_timestamp
        self._root_cause: RootCauseDetails | None = None
        self._root_cause_plan: ErrorDocumentPlan | None = None
        self._message: str | None = None
        self._timestamp: Timestamp | None = None

    def error_message(self, e: Exception) -> str:
        """``get_traceback_str``: the plan's message for a root-cause error, else flytekit's (bounded)."""
        plan = self._root_cause_plan_for(e)
        if plan is not None:
            return plan.message
        self._message = bounded_text(self._flytekit_message(e), MAX_REPORT_BYTES)
        return self._message

    def error_timestamp(self, e: Exception | None = None) -> Timestamp:
        """``get_container_error_timestamp``: the plan's stamp for a root-cause error, else flytekit's."""
        plan = self._root_cause_plan_for(e)
        if plan is not None:
            return plan.timestamp
        self._timestamp = self._flytekit_timestamp(e)
        return self._timestamp

    def staged_plan(self) -> ErrorDocumentPlan | None:
        """The plan of the document flytekit staged in this run.

        ``None`` when flytekit stamped a document without asking for its message (its error for an
        output type it does not know): nothing is known of that one, so its file gets a plain name.
        """
        if self._root_cause_plan is not None:
            return self._root_cause_plan
        if self._message is None or self._timestamp is None:
            return None
        return plan_flytekit_error(self._message, self._timestamp)

    def _root_cause_plan_for(self, e: Exception | None) -> ErrorDocumentPlan | None:
        error = carried_root_cause(e)
        if error is None:
            return None
        if error is not self._root_cause:
            plan = plan_root_cause(error, self._worker, lambda: self._flytekit_timestamp(error))
            self._root_cause, self._root_cause_plan = error, plan
        return self._root_cause_plan


def _error_code(exc: BaseException) -> str:
    """flytekit's code for ``exc``: an instance property on user errors, but a property of the
    *metaclass* on the others (``FlyteRecoverableException().error_code`` raises AttributeError)."""
    if not isinstance(exc, FlyteException):
        return "SYSTEM"
    for owner in (exc, type(exc)):
        code = getattr(owner, "error_code", None)
        if isinstance(code, str):
            return code
    return "SYSTEM"


def last_resort_document(exc: BaseException, worker: str) -> tuple[ErrorDocumentPlan, bytes]:
    """The plan and the serialized ``ErrorDocument`` for an error the agent watchdog reports while exiting.

    No exception unwinds to flytekit's ``_dispatch_execute`` then, so the document is built here,
    with the stamps ``_dispatch_execute`` would give: user origin for a worker's failure, system
    origin for a hang without one (``AgentHungError``), the kind from recoverability. Its plan is
    made as the hooks make it, with the report (or the exception's summary) standing for flytekit's
    message and now for flytekit's time, so the files are named and the lost pods' documents
    written exactly as on the normal path.
    """
    document_worker = safe_line(worker)
    error = carried_root_cause(exc)
    if error is not None:
        plan = plan_root_cause(error, document_worker, lambda: to_protobuf(time.time_ns()))
    else:
        plan = plan_flytekit_error(getattr(exc, "report", None) or exception_summary(exc), to_protobuf(time.time_ns()))
    container = errors_pb2.ContainerError
    recoverable = isinstance(exc, FlyteRecoverableException | FlyteSystemException)
    origin = execution_pb2.ExecutionError.SYSTEM if isinstance(exc, FlyteSystemException) else (
        execution_pb2.ExecutionError.USER
    )
    document = errors_pb2.ErrorDocument(
        error=container(
            code=safe_line(_error_code(exc)),
            message=plan.message,
            kind=container.RECOVERABLE if recoverable else container.NON_RECOVERABLE,
            origin=origin,
            timestamp=plan.timestamp,
            worker=document_worker,
        )
    )
    return plan, document.SerializeToString()
