"""One plan per exception: what the pod writes, decided once from the exception, never read back.

The plan's listing key must be exactly what the reader parses from the bytes that are written, for
every kind of document: a root-cause candidate's and a victim's (through flytekit's hooks and through
the watchdog's last-resort path), a lost pod's, and a plain flytekit error's. Each is checked here
against ``backend_reader.documents.listing_key_for`` of the very bytes, with hostile reports, names
and times. The documents for lost pods, now built from the exception, must be the ones the old
path built by parsing the pod's own document back.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time

import pytest
from flyteidl.core import errors_pb2, execution_pb2
from flytekit.exceptions.system import FlyteNonRecoverableSystemException, FlyteSystemException
from flytekit.exceptions.user import FlyteRecoverableException, FlyteUserRuntimeException
from flytekit.models.core import errors as flytekit_errors
from flytekit.models.core import execution as flytekit_execution
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from backend_reader.documents import listing_key_for
from flytekitplugins_rootcause.entrypoint import error_documents
from flytekitplugins_rootcause.entrypoint.error_documents import (
    LOST_POD_CODE,
    ErrorDocumentPlanner,
    last_resort_document,
)
from flytekitplugins_rootcause.exceptions import ElasticRootCauseError, ElasticRootCauseRecoverableError
from flytekitplugins_rootcause.upstream import flytekit_entrypoint
from rootcause_core.error_files import ListingKey
from rootcause_core.ordering import Role
from rootcause_core.roles import role_marker
from rootcause_core.safe_text import MAX_REPORT_BYTES, utf8_size
from rootcause_core.testimony import (
    LostPod,
    Member,
    describe_lost_pod,
    for_lost_pod,
    read_testimony,
    with_testimony,
)
from rootcause_core.timestamps import NS_PER_S, to_protobuf
from rootcause_core.worker_names import display_worker_name
from tests.entrypoint_tasks.raising import DEFAULT_TIMESTAMP_NS, failures

WORKER = "train-worker-1"
MEMBERS = (Member(0, "train-worker-0", 0, 2, True), Member(1, WORKER, 2, 2, False))
LOST = (LostPod(0, "train-worker-0", DEFAULT_TIMESTAMP_NS - 300_000_000), LostPod(2, "train-worker-2", None))

RootCauseError = ElasticRootCauseError | ElasticRootCauseRecoverableError


def planner(worker: str = WORKER) -> ErrorDocumentPlanner:
    """A run's planner with flytekit's own hooks behind it, as ``command._dispatch_execute`` makes it."""
    return ErrorDocumentPlanner(
        worker,
        flytekit_message=flytekit_entrypoint.traceback_str,
        flytekit_timestamp=flytekit_entrypoint.container_error_timestamp,
    )


def staged_by_flytekit(hooks: ErrorDocumentPlanner, exc: Exception, worker: str = WORKER) -> bytes:
    """The document flytekit 1.16's ``_dispatch_execute`` stages for ``exc``, through ``hooks``: the same
    branches, the same hook calls in the same order with the same arguments, its own models."""
    kinds = flytekit_errors.ContainerError.Kind
    if isinstance(exc, FlyteUserRuntimeException):
        recoverable = isinstance(exc.value, FlyteRecoverableException)
        message = hooks.error_message(exc)
        fields = (exc.error_code, kinds.RECOVERABLE if recoverable else kinds.NON_RECOVERABLE, "USER", exc.value)
    elif isinstance(exc, FlyteNonRecoverableSystemException):
        message = hooks.error_message(exc.value)
        fields = ("SYSTEM", kinds.NON_RECOVERABLE, "SYSTEM", exc.value)
    else:
        message = hooks.error_message(exc)
        fields = ("SYSTEM", kinds.RECOVERABLE, "SYSTEM", exc)
    code, kind, origin, stamped = fields
    container = flytekit_errors.ContainerError(
        code=code,
        message=message,
        kind=kind,
        origin=getattr(flytekit_execution.ExecutionError.ErrorKind, origin),
        timestamp=hooks.error_timestamp(stamped),
        worker=worker,
    )
    return flytekit_errors.ErrorDocument(container).to_flyte_idl().SerializeToString()


def root_cause_error(
    report: str = "[victim] rank 2 was failed by a peer",
    *,
    role: Role = Role.VICTIM,
    timestamp_ns: int | None = DEFAULT_TIMESTAMP_NS,
    lost: tuple[LostPod, ...] = LOST,
    recoverable: bool = True,
) -> RootCauseError:
    ranked = [dataclasses.replace(failure, timestamp_ns=timestamp_ns, role=role) for failure in failures(recoverable)]
    kind = ElasticRootCauseRecoverableError if recoverable else ElasticRootCauseError
    return kind(report, ranked, members=MEMBERS, lost_pods=lost)


def assert_every_key_is_the_readers(error: RootCauseError) -> None:
    """Hooks and last resort alike: each file's key is the reader's parse of the bytes under it."""
    hooks = planner()
    staged = staged_by_flytekit(hooks, FlyteUserRuntimeException(error))
    plan = hooks.staged_plan()
    assert plan is not None and plan.listing_key == listing_key_for(staged)
    last_plan, last_resort = last_resort_document(error, WORKER)
    assert last_plan.listing_key == listing_key_for(last_resort)
    for written in (*plan.lost_pod_documents, *last_plan.lost_pod_documents):
        assert written.plan.listing_key == listing_key_for(written.data)
        assert written.plan.listing_key is None or written.plan.listing_key.role == Role.LOST_POD


# --- one plan, one testimony ---------------------------------------------------------------------------


def test_one_testimony_and_one_plan_per_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[str] = []

    def counted(name: str) -> object:
        real = getattr(error_documents, name)
        return lambda *args, **kwargs: made.append(name) or real(*args, **kwargs)

    for name in ("for_failure", "plan_root_cause"):
        monkeypatch.setattr(error_documents, name, counted(name))
    hooks = planner()
    error = root_cause_error()
    staged = staged_by_flytekit(hooks, FlyteUserRuntimeException(error))  # message hook, then time hook
    plan = hooks.staged_plan()
    assert made == ["plan_root_cause", "for_failure"]
    assert plan is not None and hooks.staged_plan() is plan
    # what flytekit staged is the plan's message and stamp, and its name is the plan's key
    container = errors_pb2.ErrorDocument.FromString(staged).error
    assert (container.message, container.timestamp) == (plan.message, plan.timestamp)
    assert plan.testimony is not None and read_testimony(plan.message) == plan.testimony
    assert plan.listing_key == ListingKey(Role.VICTIM, DEFAULT_TIMESTAMP_NS)
    # another exception (another run's, or a hand-built one) gets a plan of its own
    other = root_cause_error("[root cause] boom", role=Role.CANDIDATE, recoverable=False)
    staged_by_flytekit(hooks, FlyteUserRuntimeException(other))
    assert len(made) == 4 and hooks.staged_plan() is not plan


def test_a_document_flytekit_stamps_without_asking_its_message_gets_no_plan() -> None:
    """flytekit's error for an output type it does not know asks only for a time: nothing is known
    of that document, so it is written under a plain name and the reader simply reads it."""
    hooks = planner()
    hooks.error_timestamp()
    assert hooks.staged_plan() is None


# --- the listing key is the reader's parse of the written bytes -----------------------------------------


@pytest.mark.parametrize(
    ("report", "role", "timestamp_ns", "expected"),
    [
        ("[root cause] rank 1 raised", Role.CANDIDATE, DEFAULT_TIMESTAMP_NS, (Role.CANDIDATE, DEFAULT_TIMESTAMP_NS)),
        # a victim's stamp is moved later; its key (and the reader) keep the true time
        ("[victim] rank 2 torn down", Role.VICTIM, DEFAULT_TIMESTAMP_NS, (Role.VICTIM, DEFAULT_TIMESTAMP_NS)),
        ("rank 1 ran out of memory", Role.CANDIDATE, DEFAULT_TIMESTAMP_NS, (Role.CANDIDATE, DEFAULT_TIMESTAMP_NS)),
        ("[victim] marked by the agent", Role.CANDIDATE, -5, (Role.VICTIM, -5)),
        ("[root cause] past year 9999", Role.CANDIDATE, 2**70, None),  # the reader would skip it: a plain name
    ],
)
def test_root_cause_keys_are_the_readers(
    report: str, role: Role, timestamp_ns: int, expected: tuple[Role, int] | None
) -> None:
    error = root_cause_error(report, role=role, timestamp_ns=timestamp_ns)
    assert_every_key_is_the_readers(error)
    plan, _ = last_resort_document(error, WORKER)
    assert plan.listing_key == (None if expected is None else ListingKey(*expected))


def test_a_root_cause_without_a_time_is_keyed_by_the_time_flytekit_stamps() -> None:
    error = root_cause_error(timestamp_ns=None)
    assert_every_key_is_the_readers(error)
    hooks = planner()
    before = time.time_ns()
    staged = staged_by_flytekit(hooks, FlyteUserRuntimeException(error))
    key = listing_key_for(staged)
    assert key is not None and key.timestamp_ns is not None and key.timestamp_ns >= before - 1_000  # float digits
    assert hooks.staged_plan().listing_key == key  # type: ignore[union-attr]


lost_pods = st.lists(
    st.builds(
        LostPod,
        st.integers(min_value=0, max_value=2_000_000),
        st.text(max_size=300),
        st.one_of(st.none(), st.integers(min_value=-(2**70), max_value=2**70)),
    ),
    max_size=3,
).map(tuple)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    report=st.text(max_size=400),
    role=st.sampled_from([Role.CANDIDATE, Role.VICTIM]),
    timestamp_ns=st.one_of(st.none(), st.just(0), st.integers(min_value=-(2**70), max_value=2**70)),
    lost=lost_pods,
    recoverable=st.booleans(),
)
@example(report="x\x1f[victim] a control character before the marker", role=Role.CANDIDATE,
         timestamp_ns=DEFAULT_TIMESTAMP_NS, lost=(), recoverable=False)
@example(report="[root cause] lost peer with a lone surrogate", role=Role.VICTIM,
         timestamp_ns=DEFAULT_TIMESTAMP_NS, lost=(LostPod(0, "pod-\udcff\x1b[2J" + "x" * 300, None),),
         recoverable=True)
def test_any_root_cause_error_is_keyed_as_the_reader_parses_it(
    report: str, role: Role, timestamp_ns: int | None, lost: tuple[LostPod, ...], recoverable: bool
) -> None:
    assert_every_key_is_the_readers(
        root_cause_error(report, role=role, timestamp_ns=timestamp_ns, lost=lost, recoverable=recoverable)
    )


@pytest.mark.parametrize(
    ("exc", "role"),
    [
        (FlyteUserRuntimeException(ValueError("bad batch 7")), Role.CANDIDATE),
        # an unmarked message gets the reader's default role for unmarked messages: its text patterns
        (FlyteUserRuntimeException(RuntimeError("gloo: connection reset by peer")), Role.VICTIM),
        (FlyteUserRuntimeException(RuntimeError("[lost pod] said the user")), Role.LOST_POD),
        (FlyteUserRuntimeException(FlyteRecoverableException("retry me")), Role.CANDIDATE),
        (FlyteNonRecoverableSystemException(ValueError("inputs unreadable")), Role.CANDIDATE),
        (KeyError("\x00\udc80 hostile"), Role.CANDIDATE),
    ],
)
def test_a_plain_errors_key_is_read_from_flytekits_own_message_and_time(exc: Exception, role: Role) -> None:
    hooks = planner()
    staged = staged_by_flytekit(hooks, exc)
    plan = hooks.staged_plan()
    assert plan is not None and plan.testimony is None and plan.lost_pod_documents == ()
    assert plan.listing_key == listing_key_for(staged)
    assert plan.listing_key is not None and plan.listing_key.role == role
    stamp = errors_pb2.ErrorDocument.FromString(staged).error.timestamp
    assert plan.listing_key.timestamp_ns == stamp.seconds * NS_PER_S + stamp.nanos


@pytest.mark.parametrize(("stamp", "expected_time"), [(0.0, "none"), (-1.5, "skipped"), (1.25, 1_250_000_000)])
def test_a_plain_errors_odd_flytekit_time_is_keyed_as_the_reader_takes_it(stamp: float, expected_time: object) -> None:
    """flytekit stamps a Flyte exception's own float time: zero reads as no time, and a negative one
    gives negative nanos, which no reader accepts (the file then gets a plain name)."""
    hooks = planner()
    staged = staged_by_flytekit(hooks, FlyteUserRuntimeException(FlyteRecoverableException("odd", timestamp=stamp)))
    key = hooks.staged_plan().listing_key  # type: ignore[union-attr]
    assert key == listing_key_for(staged)
    if expected_time == "skipped":
        assert key is None
    else:
        assert key is not None and key.timestamp_ns == (None if expected_time == "none" else expected_time)


@settings(max_examples=40, deadline=None)
@given(st.text(max_size=400), st.sampled_from(["user", "system", "raw"]))
def test_any_plain_error_is_keyed_as_the_reader_parses_it(text: str, wrapping: str) -> None:
    raised = ValueError(text)
    exc: Exception = {
        "user": FlyteUserRuntimeException(raised),
        "system": FlyteNonRecoverableSystemException(raised),
        "raw": raised,
    }[wrapping]
    hooks = planner()
    staged = staged_by_flytekit(hooks, exc)
    assert hooks.staged_plan().listing_key == listing_key_for(staged)  # type: ignore[union-attr]


def test_a_last_resort_hang_without_a_failure_is_keyed_as_the_reader_parses_it() -> None:
    class Hung(FlyteSystemException):  # what AgentHungError carries: a report, no failure
        report = "[victim] agent hung: rank 3 never entered allreduce"

    plan, document = last_resort_document(Hung("hung"), WORKER)
    assert plan.listing_key == listing_key_for(document)
    assert plan.listing_key is not None and plan.listing_key.role == Role.VICTIM
    assert plan.lost_pod_documents == ()


# --- the lost pods' documents: straight from the exception, as the old parsing path wrote them ----------


def parsed_lost_pod_documents(document: bytes) -> list[tuple[str, bytes]]:
    """The documents the entrypoint wrote for lost pods before plans (at 6ce588a): by parsing the
    pod's own serialized document and reading its testimony back out of the message text."""
    parsed = errors_pb2.ErrorDocument()
    parsed.ParseFromString(document)
    said = read_testimony(parsed.error.message)
    if said is None or said.reported_by is not None or not said.lost:
        return []
    reporter = parsed.error.worker
    noticed = said.failed_at_ns if said.failed_at_ns is not None else time.time_ns()
    written = []
    for peer in said.lost:
        peer_testimony = for_lost_pod(peer, noticed_ns=noticed, reported_by=reporter, members=said.members)
        report = f"{role_marker(Role.LOST_POD)} {describe_lost_pod(peer, noticed_ns=noticed, reported_by=reporter)}"
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


@pytest.mark.parametrize(
    "error",
    [
        root_cause_error(),
        root_cause_error("[root cause] rank 1 raised", role=Role.CANDIDATE, recoverable=False),
        root_cause_error(lost=(LostPod(5, "pod with spaces/and slashes", None),)),
        root_cause_error(timestamp_ns=None),  # noticed: now (frozen below)
        root_cause_error(lost=()),
    ],
)
def test_lost_pod_documents_are_the_ones_the_parsing_path_wrote(
    error: RootCauseError, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(time, "time_ns", lambda: DEFAULT_TIMESTAMP_NS + 7)
    hooks = planner()
    staged = staged_by_flytekit(hooks, FlyteUserRuntimeException(error))
    plan = hooks.staged_plan()
    assert plan is not None
    assert [(lost.worker, lost.data) for lost in plan.lost_pod_documents] == parsed_lost_pod_documents(staged)
    last_plan, last_resort = last_resort_document(error, WORKER)
    assert [(lost.worker, lost.data) for lost in last_plan.lost_pod_documents] == parsed_lost_pod_documents(
        last_resort
    )
    assert len(plan.lost_pod_documents) == len(error.lost_pods)


def test_a_hostile_lost_pod_name_still_gives_a_bounded_document() -> None:
    """A peer's name comes from another pod's environment: control characters, a lone surrogate
    (which protobuf refuses to encode) and any length must still give a document the reader reads."""
    peer = LostPod(0, "pod-\udcff\x1b[2J\n" + "é" * 250, None)
    plan, _ = last_resort_document(root_cause_error(lost=(peer,)), WORKER)
    (written,) = plan.lost_pod_documents
    container = errors_pb2.ErrorDocument.FromString(written.data).error
    assert utf8_size(container.message) <= MAX_REPORT_BYTES
    assert container.message.startswith("[lost pod] pod pod-\\udcff\\x1b[2J\n")
    assert container.worker == display_worker_name(peer.worker)
    assert read_testimony(container.message) == written.plan.testimony
    assert written.plan.listing_key == listing_key_for(written.data)
    assert written.plan.listing_key == ListingKey(Role.LOST_POD, DEFAULT_TIMESTAMP_NS)


# --- the pod side needs nothing of the reader -----------------------------------------------------------


def test_the_entrypoint_imports_neither_the_reader_nor_torch() -> None:
    """The pod side keys its files with ``rootcause_core``'s rule, not the reader's parser; and plain
    tasks run through this entrypoint too, so it must not pay for importing torch."""
    code = (
        "import flytekitplugins_rootcause.entrypoint.command, sys\n"
        "print(sorted(m for m in ('backend_reader', 'torch') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout
