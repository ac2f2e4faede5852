"""Flyte's own Go rule for an aggregated error read, ported: what propeller reports *without* us.

To show what this plugin changes, we must know what a stock propeller would say about the same files.
So this module ports flyteplugins' ``Earliest`` aggregation: list, read each file, keep the strictly
earliest timestamp. Use it in tests and the e2e benchmark, or to compare with
:class:`backend_reader.RemoteFileOutputReader`. It reads only through an fsspec filesystem and
imports neither flytekit nor torch. ``docs/backend_reader.md`` gives the steps it ports.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import fsspec
from flyteidl.core import errors_pb2, execution_pb2
from google.protobuf import message as protobuf_message

from backend_reader.filesystems import url_to_fs
from rootcause_core.error_files import ERROR_FILE_NAME
from rootcause_core.safe_text import MAX_DOCUMENT_BYTES
from rootcause_core.timestamps import from_protobuf, to_protobuf

#: Go's ``errorFileNotFoundErrorCode``'s sibling for a document without an error.
ERROR_FILE_BAD_FORMAT = "ErrorFileBadFormat"


class UpstreamReadError(Exception):
    """The Go reader would fail the whole read (and propeller retry it) because of ``path``."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"failed to read error file @[{path}]: {reason}")


@dataclasses.dataclass(frozen=True)
class UpstreamPick:
    """The ``io.ExecutionError`` the Go rule returns, and the file it came from.

    ``timestamp_ns`` is what the rule compared: ``0`` (1970) for a document without a timestamp.
    ``has_timestamp`` says whether the document had one (the ``ExecutionError`` then carries it).
    """

    code: str
    message: str
    kind: int  # flyteidl ExecutionError.ErrorKind (the container error's origin)
    worker: str
    timestamp_ns: int
    has_timestamp: bool
    is_recoverable: bool
    error_path: str

    def execution_error(self) -> execution_pb2.ExecutionError:
        """The ``flyteidl.core.ExecutionError`` propeller would record (no ``error_uri``: Go sets none)."""
        error = execution_pb2.ExecutionError(code=self.code, message=self.message, kind=self.kind, worker=self.worker)
        if self.has_timestamp:
            error.timestamp.CopyFrom(to_protobuf(self.timestamp_ns))
        return error


def list_error_files(
    fs: fsspec.AbstractFileSystem, directory: str, error_file_name: str = ERROR_FILE_NAME
) -> list[str]:
    """Paths under ``directory`` the Go rule reads: name starts with ``error``, ends with ``.pb``
    (``error.pb`` itself included), in listing order. Nothing listed when the folder is absent."""
    stem, dot, extension = error_file_name.partition(".")
    if not dot or "." in extension:
        raise ValueError(f"expected an error file name with a single dot, got {error_file_name!r}")
    try:
        entries = fs.ls(directory.rstrip("/"), detail=True)
    except FileNotFoundError:
        return []
    paths = [
        entry["name"]
        for entry in entries
        if entry.get("type") == "file" and entry["name"].rstrip("/").rsplit("/", 1)[-1].startswith(stem)
    ]
    return sorted(path for path in paths if path.endswith(f".{extension}"))


def read_upstream_document(fs: fsspec.AbstractFileSystem, path: str, max_payload_bytes: int) -> UpstreamPick:
    """One file as the Go rule sees it, or :class:`UpstreamReadError` where Go fails the read."""
    try:
        size = fs.size(path)
        if size is not None and size > max_payload_bytes:
            raise UpstreamReadError(path, f"too large [{size}] bytes, max allowed [{max_payload_bytes}] bytes")
        data = fs.cat_file(path)
    except OSError as error:
        raise UpstreamReadError(path, f"{type(error).__name__}: {error}") from error
    if len(data) > max_payload_bytes:
        raise UpstreamReadError(path, f"too large [{len(data)}] bytes, max allowed [{max_payload_bytes}] bytes")
    document = errors_pb2.ErrorDocument()
    try:
        document.ParseFromString(data)
    except (protobuf_message.DecodeError, ValueError, RuntimeError) as error:
        raise UpstreamReadError(path, f"not an ErrorDocument: {error}") from error
    if not document.HasField("error"):
        return UpstreamPick(
            code=ERROR_FILE_BAD_FORMAT,
            message=f"error not formatted correctly, nil error @path [{path}]",
            kind=execution_pb2.ExecutionError.SYSTEM,
            worker="",
            timestamp_ns=0,
            has_timestamp=False,
            is_recoverable=True,
            error_path=path,
        )
    error = document.error
    has_timestamp = error.HasField("timestamp")
    return UpstreamPick(
        code=error.code,
        message=error.message,
        kind=error.origin,
        worker=error.worker,
        timestamp_ns=from_protobuf(error.timestamp) if has_timestamp else 0,
        has_timestamp=has_timestamp,
        is_recoverable=error.kind == errors_pb2.ContainerError.RECOVERABLE,
        error_path=path,
    )


def earliest_error(
    output_prefix: str,
    fs: fsspec.AbstractFileSystem | None = None,
    *,
    error_file_name: str = ERROR_FILE_NAME,
    max_payload_bytes: int = MAX_DOCUMENT_BYTES,
    **storage_options: Any,
) -> UpstreamPick | None:
    """What Flyte's Go reader with the ``Earliest`` strategy reports for ``output_prefix``.

    ``fs``: the filesystem to read with; by default the one fsspec makes for the prefix's protocol
    with ``storage_options``. Returns ``None`` when no error file is listed (Go: no error). Raises
    :class:`UpstreamReadError` when any listed file cannot be read, as the Go reader fails then.
    """
    if fs is None:
        fs, output_prefix = url_to_fs(output_prefix, **storage_options)
    best: UpstreamPick | None = None
    for path in list_error_files(fs, output_prefix, error_file_name):
        pick = read_upstream_document(fs, path, max_payload_bytes)
        if best is None or pick.timestamp_ns < best.timestamp_ns:
            best = pick
    return best
