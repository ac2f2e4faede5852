"""Write a failing pod's error documents to the output prefix, one store call per file.

flytekit uploads its engine folder with a recursive put, which overwrites whatever is there; that
is how the last pod's ``error.pb`` ends up replacing the first pod's. Here each file is written on
its own:

- the per-worker file with one plain write (its name holds a fresh uuid, so nothing is replaced,
  and it needs no conditional-write support from the store);
- ``error.pb`` with one atomic create-if-absent, so the first pod to get there keeps it:
  ``fs.pipe_file(path, data, mode="create")`` on object stores (gcsfs sends ``ifGenerationMatch=0``,
  s3fs sends ``If-None-Match: *``; both raise ``FileExistsError`` when the object exists), and a hard
  link of a fully written temporary file on local disks (``link`` fails if the name exists, and
  readers never see a half-written file; fsspec's local ``mode="create"`` is check-then-write).

Remote filesystems come from flytekit's ``FileAccessProvider`` (the async instance flytekit itself
uses, on flytekit's event loop), so the credentials and endpoints Flyte configured for the task
(``FLYTE_AWS_*``, gcsfs defaults, fsspec config) apply unchanged.
Any failure is collected with its path and reason and raised as :class:`ErrorDocumentWriteError`
after every file was tried: a pod must never lose its error silently.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import time
import uuid
from typing import Any, Protocol

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

_MAX_REASON_LENGTH = 300
#: Tries of a create-if-absent that S3 answered with a write conflict, and the backoff step between.
_CONFLICT_ATTEMPTS = 5
_CONFLICT_BACKOFF_S = 0.05
#: errnos meaning "this filesystem cannot hard-link": fall back to an exclusive open.
_NO_LINK_ERRNOS = frozenset({errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK})


@dataclasses.dataclass(frozen=True)
class WriteFailure:
    """One error file that could not be written, and why (one line, for stderr)."""

    path: str
    reason: str

    def describe(self) -> str:
        return f"could not write error document {self.path}: {self.reason}"


class ErrorDocumentWriteError(Exception):
    """At least one error file could not be written; ``failures`` says which and why."""

    def __init__(self, failures: tuple[WriteFailure, ...]) -> None:
        self.failures = failures
        super().__init__("; ".join(failure.describe() for failure in failures))


@dataclasses.dataclass(frozen=True)
class WriteOutcome:
    """What was written: the per-worker file, and whether this pod created ``error.pb``."""

    per_worker_path: str | None
    shared_path: str | None
    shared_created: bool | None  # None: not attempted; False: another pod created it first


class ErrorStore(Protocol):
    """The two writes error documents need; ``path`` is a full path or URL."""

    def put(self, path: str, data: bytes) -> None: ...

    def create(self, path: str, data: bytes) -> bool:
        """Write only if ``path`` does not exist, atomically; False when it already existed."""
        ...


class LocalErrorStore:
    """A local folder (Flyte's local runs, tests, mounted volumes)."""

    def put(self, path: str, data: bytes) -> None:
        temporary = self._write_temporary(path, data)
        os.replace(temporary, path)

    def create(self, path: str, data: bytes) -> bool:
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

    def put(self, path: str, data: bytes) -> None:
        loop_manager.run_sync(self._pipe, path, data, "overwrite")

    def create(self, path: str, data: bytes) -> bool:
        attempt = 1
        while True:
            try:
                loop_manager.run_sync(self._pipe, path, data, "create")
                return True
            except FileExistsError:
                return False
            except OSError as error:
                if attempt >= _CONFLICT_ATTEMPTS or not is_write_conflict(error):
                    raise
            time.sleep(_CONFLICT_BACKOFF_S * attempt)
            attempt += 1

    async def _pipe(self, path: str, data: bytes, mode: str) -> None:
        fs = await self._filesystems.get_async_filesystem_for_path(path)
        if isinstance(fs, AsyncFileSystem):
            await fs._pipe_file(path, data, mode=mode)
        else:
            fs.pipe_file(path, data, mode=mode)


def is_write_conflict(error: BaseException) -> bool:
    """S3's answer to a conditional write racing another one on the same key (409).

    AWS S3 may answer ``409 ConditionalRequestConflict`` instead of ``412`` while a concurrent
    conditional write is in flight; the request is to be retried, and then finds the winner's object
    (``FileExistsError``). s3fs turns it into a plain ``OSError`` whose cause is botocore's error.
    """
    response = getattr(error.__cause__, "response", None) or {}
    code = response.get("Error", {}).get("Code")
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return code == "ConditionalRequestConflict" or (code is None and status == 409)


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
    line = f"{type(error).__name__}: {hint} ({text})" if hint else f"{type(error).__name__}: {text}"
    return line if len(line) <= _MAX_REASON_LENGTH else line[: _MAX_REASON_LENGTH - 3] + "..."


def write_error_documents(
    output_prefix: str,
    document: bytes,
    worker: str,
    plan: ErrorDocumentPlan | None,
    policy: ErrorFilePolicy,
    filesystems: FilesystemSource,
) -> WriteOutcome:
    """Write ``document`` (a serialized ``ErrorDocument``) as ``policy`` says; raise if any write fails.

    ``plan`` is the document's (``error_documents.ErrorDocumentPlan``): its listing key names the
    per-worker file, and its documents for the peers this pod found lost are written too. ``None``
    for a document nothing is known of: a plain name, no other document. The bytes themselves are
    written as given, never parsed here.

    The per-worker file is written first: it is the one that cannot collide, so the most useful
    copy is in place before the contended ``error.pb``. With per-worker files, the lost peers'
    documents follow, each named for its peer. ``error.pb`` (for backends that read only that file)
    gets the document of the first lost peer when there is one: this pod's own document then names
    only a victim.
    """
    failures: list[WriteFailure] = []
    per_worker_path = shared_path = None
    shared_created: bool | None = None
    store = store_for(output_prefix, filesystems)
    written_for_lost = plan.lost_peer_documents if plan is not None else ()
    if policy.per_worker_files:
        key = plan.listing_key if plan is not None else None
        per_worker_path = join(output_prefix, per_worker_file_name(worker, uuid.uuid4().hex, key))
        writes = [(per_worker_path, document)] + [
            (join(output_prefix, per_worker_file_name(lost.worker, uuid.uuid4().hex, lost.plan.listing_key)), lost.data)
            for lost in written_for_lost
        ]
        for path, data in writes:
            try:
                store.put(path, data)
            except Exception as error:
                failures.append(WriteFailure(path, _reason(error)))
    if policy.error_pb_if_absent:
        shared_path = join(output_prefix, ERROR_FILE_NAME)
        try:
            shared_created = store.create(shared_path, written_for_lost[0].data if written_for_lost else document)
        except Exception as error:
            failures.append(WriteFailure(shared_path, _reason(error)))
    if failures:
        raise ErrorDocumentWriteError(tuple(failures))
    return WriteOutcome(per_worker_path, shared_path, shared_created)
