"""What the patched entrypoint writes on failure, decided without any I/O.

- which files (:class:`ErrorFilePolicy`, from the backend's strategy variable and the task config);
- their names (``error-<sanitized worker>-<uuid hex>.<listing key>.pb`` directly under the output
  prefix, where Flyte's backend lists ``error*.pb``, plus the shared ``error.pb``); the listing key
  is the document's role and time, so a reader finds the root cause from a listing
  (``rootcause_core.error_files``);
- the ``ContainerError`` stamps flytekit cannot give: the root cause's time to the nanosecond
  (flytekit goes through a float, which loses sub-microsecond digits), and, for
  root-cause errors, the report as the message (role marker first, ``rootcause_core.roles``)
  ending with the pod's testimony (``rootcause_core.testimony``). A pod whose root cause is a
  victim stamps its document ``VICTIM_STAMP_DELAY_NS`` after the failure, so that upstream Flyte's
  earliest-timestamp rule, which the console shows, picks a root-cause candidate's document over
  it despite clock skew between nodes; its testimony keeps the true time for this project's reader.

Everything else in the ``ContainerError`` (code, kind, origin) stays flytekit's own.

The message always follows ``rootcause_core.safe_text``: escaped (a lone surrogate would make
protobuf refuse to encode the document, and the pod would write none) and within propeller's
message limit, so the document stays far below propeller's payload limit.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

from flyteidl.core import errors_pb2, execution_pb2
from flytekit.core.constants import ERROR_FILE_NAME
from flytekit.exceptions.base import FlyteException
from flytekit.exceptions.system import FlyteSystemException
from flytekit.exceptions.user import FlyteRecoverableException, FlyteUserRuntimeException
from google.protobuf.timestamp_pb2 import Timestamp

from backend_reader.documents import listing_key_for
from flytekitplugins_rootcause.exceptions import RootCauseDetails
from rootcause_core.error_files import keyed_file_name, per_worker_stem
from rootcause_core.ordering import Role
from rootcause_core.roles import role_from_marker, role_marker
from rootcause_core.safe_text import MAX_REPORT_BYTES, bounded_text, exception_summary, safe_line
from rootcause_core.testimony import (
    PodTestimony,
    describe_lost_peer,
    for_failure,
    for_lost_peer,
    read_testimony,
    with_testimony,
)
from rootcause_core.timestamps import to_protobuf
from rootcause_core.worker_names import display_worker_name

if TYPE_CHECKING:  # the config module imports kfpytorch and torch; the entrypoint must not need them
    from flytekitplugins_rootcause.config import ElasticRootCause

#: Environment variables the backend sets when it aggregates ``error*.pb`` files (same as flytekit).
DIST_ERROR_STRATEGY_ENV_VARS: tuple[str, ...] = ("FLYTE_INTERNAL_DIST_ERROR_STRATEGY", "_F_DES")

#: The single error file every Flyte backend reads (and the only one without aggregation).
SHARED_ERROR_FILE_NAME: str = ERROR_FILE_NAME


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


def per_worker_file_name(worker: str, token: str, document: bytes) -> str:
    """``error-<sanitized worker>-<token>.<listing key>.pb`` for the serialized ``document``.

    ``token`` is a fresh uuid hex per write. The name starts with ``error`` and ends with ``.pb``,
    the pattern Flyte's aggregating reader lists; the listing key (role and time, as the reader
    will parse them from ``document``) lets ``backend_reader`` skip downloading files that cannot
    be the root cause. A document the reader could not parse gets no key and is simply read.
    """
    return keyed_file_name(per_worker_stem(worker, token), listing_key_for(document))


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
        lost=error.lost_peers,
    )


#: ``ContainerError.code`` of a document written for a lost pod (flytekit's ``ORIGIN:Name`` form).
LOST_POD_CODE = "SYSTEM:LostPod"


def lost_peer_documents(document: bytes) -> list[tuple[str, bytes]]:
    """For each peer this pod's document names as lost: ``(that pod's name, a document for it)``.

    A lost pod writes nothing, so its peers write for it (``rootcause_core.testimony``): the
    document's ``worker`` is the lost pod, its message says what is known (``[lost pod]`` marker
    first), its kind is recoverable and its origin the system (a lost node is nobody's code), and it
    is stamped ``LOST_PEER_STAMP_DELAY_NS`` after the moment the peers lost it. Decided from the
    document itself, so the normal path and the watchdog's last-resort path write the same. A
    document that is itself written for a lost pod, or that names none, yields nothing.
    """
    parsed = errors_pb2.ErrorDocument()
    try:
        parsed.ParseFromString(document)
    except Exception:  # not ours to judge here: the pod's own document is written as it is
        return []
    said = read_testimony(parsed.error.message)
    if said is None or said.reported_by is not None or not said.lost:
        return []
    reporter = parsed.error.worker
    noticed = said.failed_at_ns if said.failed_at_ns is not None else time.time_ns()
    written = []
    for peer in said.lost:
        peer_testimony = for_lost_peer(peer, noticed_ns=noticed, reported_by=reporter, members=said.members)
        report = f"{role_marker(Role.LOST_PEER)} {describe_lost_peer(peer, noticed_ns=noticed, reported_by=reporter)}"
        container = errors_pb2.ContainerError(
            code=LOST_POD_CODE,
            message=with_testimony(report, peer_testimony),
            kind=errors_pb2.ContainerError.RECOVERABLE,
            origin=execution_pb2.ExecutionError.SYSTEM,
            timestamp=to_protobuf(peer_testimony.stamped_ns() or noticed),
            worker=display_worker_name(peer.worker),
        )
        written.append((peer.worker, errors_pb2.ErrorDocument(error=container).SerializeToString()))
    return written


def exact_error_timestamp(exc: BaseException | None) -> Timestamp | None:
    """The document's time: the root cause's, to the ns (a victim's moved by its stamp delay), or
    ``None`` when ``exc`` carries none."""
    error = carried_root_cause(exc)
    stamped = None if error is None else testimony(error).stamped_ns()
    return None if stamped is None else to_protobuf(stamped)


def error_message(flytekit_message: str, exc: BaseException | None) -> str:
    """The ``ContainerError`` message: the root-cause report for root-cause errors, else flytekit's.

    For an ``ElasticRootCause*Error`` the report is what a person needs: its first line names the
    root cause behind the role marker (which readers parse, ``rootcause_core.roles``), then comes
    the root cause's own traceback and one line per other failure. flytekit's text would open with
    the agent's internal traceback instead. A report without a marker (an error built by hand)
    gets one; its last line is the pod's testimony. Messages of other errors stay flytekit's.
    Either is made safe and bounded (``safe_text.bounded_text``, to ``MAX_REPORT_BYTES`` in all).
    """
    error = carried_root_cause(exc)
    if error is None:
        return bounded_text(flytekit_message, MAX_REPORT_BYTES)
    report = error.report
    if role_from_marker(report.splitlines()[0] if report else "") is None:
        report = f"{role_marker(error.root_cause.role)} {report}"
    said = testimony(error)
    return with_testimony(bounded_text(report, MAX_REPORT_BYTES - len(said.line()) - 1), said)


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


def last_resort_document(exc: BaseException, worker: str) -> bytes:
    """The serialized ``ErrorDocument`` for an error the agent watchdog reports while exiting.

    No exception unwinds to flytekit's ``_dispatch_execute`` then, so the document is built here,
    with the stamps ``_dispatch_execute`` would give: user origin for a worker's failure, system
    origin for a hang without one (``AgentHungError``), the kind from recoverability, the root
    cause's exact time (or now), the report as the message.
    """
    container = errors_pb2.ContainerError
    recoverable = isinstance(exc, FlyteRecoverableException | FlyteSystemException)
    origin = execution_pb2.ExecutionError.SYSTEM if isinstance(exc, FlyteSystemException) else (
        execution_pb2.ExecutionError.USER
    )
    timestamp = exact_error_timestamp(exc) or to_protobuf(time.time_ns())
    code = _error_code(exc)
    report = getattr(exc, "report", None) or exception_summary(exc)
    document = errors_pb2.ErrorDocument(
        error=container(
            code=safe_line(code),
            message=error_message(report, exc),
            kind=container.RECOVERABLE if recoverable else container.NON_RECOVERABLE,
            origin=origin,
            timestamp=timestamp,
            worker=safe_line(worker),
        )
    )
    return document.SerializeToString()
