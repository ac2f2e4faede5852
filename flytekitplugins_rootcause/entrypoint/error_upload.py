"""Write a failing pod's error documents to the output prefix, each file on its own, under one deadline.

flytekit uploads its engine folder with a recursive put, which overwrites what is there. That is how
the last pod's ``error.pb`` replaces the first pod's. Here each file is written on its own: the
per-worker file plainly, ``error.pb`` with an atomic create-if-absent. Every failing pod writes at the
same moment, when stores throttle, so each write is retried under one deadline. Once one document is
in place for Flyte, the pod has done its duty, and failed extras are only logged. Only when no file
could be written is :class:`ErrorDocumentWriteError` raised. ``docs/entrypoint.md`` has the mechanics.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import functools
import os
import uuid
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from flytekit.utils.asyn import loop_manager
from fsspec.asyn import AsyncFileSystem
from fsspec.utils import get_protocol

from flytekitplugins_rootcause.entrypoint.error_documents import (
    ErrorDocumentPlan,
    ErrorFilePolicy,
    per_worker_file_name,
)
from rootcause_core import store_paths
from rootcause_core.error_files import ERROR_FILE_NAME
from rootcause_core.store_retry import Deadline, GaveUp, call_with_retries, store_answer

T = TypeVar("T")

_MAX_REASON_LENGTH = 300
#: errnos meaning "this filesystem cannot hard-link": fall back to an exclusive open.
_NO_LINK_ERRNOS = frozenset({errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK})


@dataclasses.dataclass(frozen=True)
class WriteFailure:
    """One error file that could not be written, why, and how hard it was tried (one line, for stderr)."""

    path: str
    reason: str
    tries: int
    elapsed_s: float
    ending: str  # how the tries ended (``GaveUp.summary``): "1 try in 0.1 s, not retried: ..."

    @classmethod
    def gave_up(cls, path: str, gave_up: GaveUp) -> WriteFailure:
        return cls(path, _reason(gave_up.error), gave_up.tries, gave_up.elapsed_s, gave_up.summary())

    def describe(self) -> str:
        return f"could not write error document {self.path}: {self.reason} [{self.ending}]"


class ErrorDocumentWriteError(Exception):
    """No error file could be written at all; ``failures`` says which files failed and why."""

    def __init__(self, failures: tuple[WriteFailure, ...]) -> None:
        self.failures = failures
        super().__init__("; ".join(failure.describe() for failure in failures))


@dataclasses.dataclass(frozen=True)
class WriteOutcome:
    """What was written: the per-worker file, whether this pod created ``error.pb``, what failed.

    Returned once at least one file was written; ``failures`` are the files that were not (they are
    logged, and do not fail the pod).
    """

    per_worker_path: str | None  # None: the policy writes none, or it failed (see ``failures``)
    shared_path: str | None  # None: the policy writes none
    shared_created: bool | None  # None: not attempted or failed; False: another pod created it first
    failures: tuple[WriteFailure, ...] = ()


class ErrorStore(Protocol):
    """The two writes error documents need; ``path`` is a full path or URL.

    ``timeout_s`` bounds one request (the time left before the pod's deadline); ``None``: unbounded.
    """

    def put(self, path: str, data: bytes, timeout_s: float | None = None) -> None: ...

    def create(self, path: str, data: bytes, timeout_s: float | None = None) -> bool:
        """Write only if ``path`` does not exist, atomically; False when it already existed."""
        ...


class LocalErrorStore:
    """A local folder (Flyte's local runs, tests, mounted volumes); local writes take no timeout."""

    def put(self, path: str, data: bytes, timeout_s: float | None = None) -> None:
        temporary = self._write_temporary(path, data)
        os.replace(temporary, path)

    def create(self, path: str, data: bytes, timeout_s: float | None = None) -> bool:
        temporary = self._write_temporary(path, data)
        try:
            os.link(temporary, path)
        except FileExistsError:
            return False
        except OSError as error:
            if error.errno not in _NO_LINK_ERRNOS:
                raise
            return self._create_exclusive(path, data)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
        return True

    @staticmethod
    def _write_temporary(path: str, data: bytes) -> str:
        """A complete copy next to ``path``; its hidden name never matches ``error*.pb`` listings."""
        directory = os.path.dirname(path) or "."
        os.makedirs(directory, exist_ok=True)
        temporary = os.path.join(directory, f".tmp-{uuid.uuid4().hex}")
        with open(temporary, "xb") as handle:
            handle.write(data)
        return temporary

    @staticmethod
    def _create_exclusive(path: str, data: bytes) -> bool:
        try:
            with open(path, "xb") as handle:
                handle.write(data)
        except FileExistsError:
            return False
        return True


class FsspecErrorStore:
    """An object store through flytekit's own async filesystem for the prefix, one request per write.

    That filesystem is the instance flytekit already used for the task's inputs (fsspec caches it
    per event loop), so its credentials, endpoint and open connections are reused instead of a second
    client being built while the pod is failing.
    """

    def __init__(self, filesystems: FilesystemSource) -> None:
        self._filesystems = filesystems

    def put(self, path: str, data: bytes, timeout_s: float | None = None) -> None:
        loop_manager.run_sync(self._pipe, path, data, "overwrite", timeout_s)

    def create(self, path: str, data: bytes, timeout_s: float | None = None) -> bool:
        try:
            loop_manager.run_sync(self._pipe, path, data, "create", timeout_s)
        except FileExistsError:
            return False
        return True

    async def _pipe(self, path: str, data: bytes, mode: str, timeout_s: float | None) -> None:
        """One request; past ``timeout_s`` it is cancelled and raises ``TimeoutError``."""
        fs = await self._filesystems.get_async_filesystem_for_path(path)
        if isinstance(fs, AsyncFileSystem):
            bound = asyncio.timeout(timeout_s)
            try:
                async with bound:
                    await fs._pipe_file(path, data, mode=mode)
            except TimeoutError:
                if not bound.expired():
                    raise  # the client's own timeout, with its own words
                raise TimeoutError(f"no answer within the {timeout_s:.1f} s left before the deadline") from None
        else:
            fs.pipe_file(path, data, mode=mode)  # a blocking filesystem cannot be bounded from here


class FilesystemSource(Protocol):
    """What is needed of flytekit's ``FileAccessProvider``: its configured filesystem for a path."""

    async def get_async_filesystem_for_path(self, path: str = "", anonymous: bool = False) -> Any: ...


def is_local(prefix: str) -> bool:
    return get_protocol(prefix) in {"file", "local"}


def local_path(prefix: str) -> str:
    """``/a/b`` for ``/a/b``, ``file:///a/b`` and ``file://a/b``-style prefixes."""
    for scheme in ("file://", "local://"):
        if prefix.startswith(scheme):
            return prefix[len(scheme) :]
    return prefix


def store_for(prefix: str, filesystems: FilesystemSource) -> ErrorStore:
    """The store behind ``prefix``: local disk, or the filesystem flytekit uses for it.

    Nothing is contacted here; an unknown protocol or broken credentials show up as a failed write.
    """
    if is_local(prefix):
        return LocalErrorStore()
    return FsspecErrorStore(filesystems)


def join(prefix: str, name: str) -> str:
    """``name`` directly under ``prefix`` (a single safe segment): a local prefix as a plain path, then
    the one joining rule both sides use (``rootcause_core.store_paths``)."""
    return store_paths.join(local_path(prefix) if is_local(prefix) else prefix, name)


#: What the usual errors mean here (gcsfs, for one, says only the URL it was refused at).
_HINTS: tuple[tuple[type[BaseException], str], ...] = (
    (FileNotFoundError, "the bucket or parent folder does not exist"),
    (PermissionError, "the store refused the write"),
    (NotADirectoryError, "part of the prefix is a file"),
)


def _reason(error: BaseException) -> str:
    text = " ".join(str(error).split()) or "no details"
    hint = next((hint for kind, hint in _HINTS if isinstance(error, kind)), None)
    answer = store_answer(error)
    kind = f"{type(error).__name__} ({answer})" if answer else type(error).__name__
    line = f"{kind}: {hint} ({text})" if hint else f"{kind}: {text}"
    return line if len(line) <= _MAX_REASON_LENGTH else line[: _MAX_REASON_LENGTH - 3] + "..."


def _tried(path: str, write: Callable[[float], T], deadline: Deadline) -> tuple[T | None, WriteFailure | None]:
    """``write(seconds_left)`` with retries under ``deadline``: its result, or why it failed."""
    try:
        return call_with_retries(write, deadline), None
    except GaveUp as gave_up:
        return None, WriteFailure.gave_up(path, gave_up)


def write_error_documents(
    output_prefix: str,
    document: bytes,
    worker: str,
    plan: ErrorDocumentPlan | None,
    policy: ErrorFilePolicy,
    filesystems: FilesystemSource,
    deadline_s: float | None = None,
) -> WriteOutcome:
    """Write ``document`` (a serialized ``ErrorDocument``) as ``policy`` says; raise only if no file
    could be written (:class:`ErrorDocumentWriteError`), else return what failed with what was written.

    ``plan`` is the document's (``error_documents.ErrorDocumentPlan``): its listing key names the
    per-worker file, and its documents for the peers this pod found lost are written too. ``None``
    for a document nothing is known of: a plain name, no other document. The bytes themselves are
    written as given, never parsed here.

    The per-worker file is written first: it is the one that cannot collide, so the most useful
    copy is in place before the contended ``error.pb``. With per-worker files, the lost pods'
    documents follow, each named for its peer. ``error.pb`` (for backends that read only that file)
    gets the document of the first lost pod when there is one: this pod's own document then names
    only a victim.

    All the writes share one deadline of ``deadline_s`` (``store_retry.DEADLINE_S`` when ``None``):
    the last-resort writer, which runs under the failure sink's time limit, passes a shorter one.
    """
    failures: list[WriteFailure] = []
    per_worker_path = shared_path = None
    shared_created: bool | None = None
    documented = False  # some file Flyte reads is in place: this pod's, a lost pod's, or error.pb
    deadline = Deadline(deadline_s)
    store = store_for(output_prefix, filesystems)
    written_for_lost = plan.lost_pod_documents if plan is not None else ()
    if policy.per_worker_files:
        key = plan.listing_key if plan is not None else None
        per_worker_path = join(output_prefix, per_worker_file_name(worker, uuid.uuid4().hex, key))
        writes = [(per_worker_path, document)] + [
            (join(output_prefix, per_worker_file_name(lost.worker, uuid.uuid4().hex, lost.plan.listing_key)), lost.data)
            for lost in written_for_lost
        ]
        for path, data in writes:
            _, failure = _tried(path, functools.partial(store.put, path, data), deadline)
            if failure is not None:
                failures.append(failure)
                if path == per_worker_path:
                    per_worker_path = None
            documented = documented or failure is None
    if policy.error_pb_if_absent:
        shared_path = join(output_prefix, ERROR_FILE_NAME)
        shared_data = written_for_lost[0].data if written_for_lost else document
        create = functools.partial(store.create, shared_path, shared_data)
        shared_created, failure = _tried(shared_path, create, deadline)
        if failure is not None:
            failures.append(failure)
        documented = documented or failure is None  # created, or another pod's error is there first
    if failures and not documented:
        raise ErrorDocumentWriteError(tuple(failures))
    return WriteOutcome(per_worker_path, shared_path, shared_created, tuple(failures))
