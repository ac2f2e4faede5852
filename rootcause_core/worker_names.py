"""Worker names: where they come from, and how they become safe parts of file names.

A worker name comes from the backend (``FLYTE_INTERNAL_WORKER_NAME`` / ``_F_WN``, the pod name) or
from the host name. Neither is under our control, and the name ends up in an object key next to
the task's outputs, so it is sanitized before use: a hostile or broken name must never move the
error file out of the output prefix (``/``, ``..``), hide it (a leading ``.``), or break listing and
logs (control characters, unbounded length). Pod names are DNS labels, so ordinary names pass
through unchanged and stay readable.

Pure functions; the environment and host name are passed in, so tests need no process state
(:func:`current_worker_name` reads this process's, for callers that want exactly that).
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
from collections.abc import Callable, Mapping

#: Environment variables the backend sets to name the worker (pod), most specific first; the same
#: names flytekit's ``pyflyte-execute`` reads.
WORKER_NAME_ENV_VARS: tuple[str, ...] = ("FLYTE_INTERNAL_WORKER_NAME", "_F_WN")

#: Longest sanitized name. Kubernetes pod names are at most 63 characters; the file name adds
#: ``error-`` and ``-<32 hex>.pb``, well inside every object store's key limit.
MAX_WORKER_NAME_LENGTH = 63

#: Longest name kept in ``ContainerError.worker`` (shown by the UI, so bounded but generous).
MAX_DISPLAY_NAME_LENGTH = 256

#: Stands in for an empty or entirely unusable name.
UNKNOWN_WORKER = "unknown-worker"

_UNSAFE_RUN = re.compile(r"[^A-Za-z0-9_.-]+")
_DOT_RUN = re.compile(r"\.{2,}")
_UNDERSCORE_RUN = re.compile(r"_{2,}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_HASH_LENGTH = 8


def raw_worker_name(environ: Mapping[str, str], hostname: Callable[[], str] = socket.gethostname) -> str:
    """The worker's name as the backend or the host gives it, not yet sanitized.

    A variable that is set but empty counts as unset, so a pod always has a name.
    """
    for variable in WORKER_NAME_ENV_VARS:
        value = environ.get(variable, "")
        if value:
            return value
    return hostname()


def current_worker_name() -> str:
    """This process's worker (pod) name, as :func:`raw_worker_name` finds it in its environment."""
    return raw_worker_name(os.environ)


def sanitize_worker_name(name: str, max_length: int = MAX_WORKER_NAME_LENGTH) -> str:
    """A form of ``name`` that is safe as one path segment of an object key or a local file name.

    Keeps ``[A-Za-z0-9_.-]``; every run of other characters (``/``, ``\\``, spaces, control and
    non-ASCII characters) becomes one ``_``; runs of dots become ``_`` so no ``..`` survives, and
    runs of ``_`` shrink to one (``../../x`` reads ``_x``, not ``____x``); a leading ``.`` or ``-``
    becomes ``_`` (no hidden files, nothing that reads as an option). A name longer than
    ``max_length`` is cut and ends with a short hash of the full name, so two long names that share
    a prefix still give distinct files.
    """
    if max_length < _HASH_LENGTH + 2:
        raise ValueError(f"max_length must be at least {_HASH_LENGTH + 2}, got {max_length}")
    safe = _UNDERSCORE_RUN.sub("_", _DOT_RUN.sub("_", _UNSAFE_RUN.sub("_", name)))
    if safe[:1] in {".", "-"}:
        safe = "_" + safe[1:]
    if not safe.strip("_"):
        return UNKNOWN_WORKER
    if len(safe) > max_length:
        digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_LENGTH]
        safe = f"{safe[: max_length - _HASH_LENGTH - 1]}-{digest}"
    return safe


def display_worker_name(name: str, max_length: int = MAX_DISPLAY_NAME_LENGTH) -> str:
    """The name as stored in ``ContainerError.worker``: readable, valid UTF-8, one line, bounded.

    Keeps the name as the backend gave it where it can (the UI shows it and users search pods by
    it); drops control characters, and escapes bytes that are not UTF-8 (environment values may be
    arbitrary bytes, and protobuf refuses to encode them).
    """
    printable = _CONTROL.sub("", name.encode("utf-8", "backslashreplace").decode("utf-8"))
    return printable[:max_length] or UNKNOWN_WORKER
