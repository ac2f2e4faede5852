"""Error file names: where Flyte looks, how a pod names its own file, and the listing key in the name.

Propeller needs one answer, the root cause, but a large job leaves thousands of error files. Reading
each one is a request, and a listing already returns every name. So the writer puts the failure's
role and time, the listing key, into each file's name. The reader then downloads only the files that
can still win. The writer and the reader build and parse names with this one definition, and a key
with one rule (:func:`content_listing_key`). So a name and its content agree by construction.
``docs/messages.md`` gives the format and the trust rules.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Protocol

from google.protobuf.timestamp_pb2 import Timestamp

from rootcause_core.ordering import Role, role_time_key
from rootcause_core.roles import classify_role
from rootcause_core.safe_text import safe_text
from rootcause_core.testimony import true_failure_time
from rootcause_core.timestamps import document_time_ns
from rootcause_core.worker_names import sanitize_worker_name

#: The single-writer file Flyte reads when no aggregation strategy is on.
ERROR_FILE_NAME = "error.pb"
#: Every error file's name starts so: it is the prefix Flyte's aggregating Go reader lists.
ERROR_FILE_STEM = "error"
PROTO_SUFFIX = ".pb"

FORMAT_TAG = "rc1"
_ROLE_LETTERS = {Role.CANDIDATE: "c", Role.VICTIM: "v", Role.LOST_POD: "l"}
_LETTER_ROLES = {letter: role for role, letter in _ROLE_LETTERS.items()}
_NO_TIME = "n"
_KEYED_NAME = re.compile(
    rf"^(?P<stem>{ERROR_FILE_STEM}.*)\.{FORMAT_TAG}(?P<role>[cvl])(?P<time>-?[0-9]{{1,21}}|{_NO_TIME})"
    rf"{re.escape(PROTO_SUFFIX)}$"
)


def is_error_file_name(name: str) -> bool:
    """True for a base name Flyte's aggregating reader lists as an error document: ``error.pb``,
    flytekit's ``error-<uuid>.pb`` and this plugin's ``error-<worker>-<uuid>.<listing key>.pb``."""
    return name.startswith(ERROR_FILE_STEM) and name.endswith(PROTO_SUFFIX)


class _RoleAndTime(Protocol):
    """What a parsed error file must tell for its listing key to be checked against it."""

    @property
    def role(self) -> Role: ...

    @property
    def timestamp_ns(self) -> int | None: ...


def per_worker_stem(worker: str, token: str) -> str:
    """``error-<sanitized worker>-<token>``: one pod's own file, never overwritten by another pod.

    ``token`` is a fresh uuid hex per write; the worker part is sanitized, so no name moves the file
    out of the output prefix or hides it.
    """
    if not token or not token.isalnum():
        raise ValueError(f"token must be a non-empty alphanumeric string, got {token!r}")
    return f"{ERROR_FILE_STEM}-{sanitize_worker_name(worker)}-{token}"


def is_file_of(name: str, worker: str) -> bool:
    """``name`` is a per-worker file written for ``worker`` (its own, or one written for it as a lost pod)."""
    stem = f"{ERROR_FILE_STEM}-{sanitize_worker_name(worker)}-"
    if not name.startswith(stem) or not name.endswith(".pb"):
        return False
    token = name[len(stem) :].split(".", 1)[0]
    return bool(token) and token.isalnum()


@dataclasses.dataclass(frozen=True)
class ListingKey:
    """What a file's name says about its failure: the inputs of the rule's first two steps."""

    role: Role
    timestamp_ns: int | None

    @property
    def sort_key(self) -> tuple[int, int, int]:
        return role_time_key(self.role, self.timestamp_ns)

    def token(self) -> str:
        """The name part, e.g. ``rc1c1790000000123456789`` or ``rc1vn``."""
        time = _NO_TIME if self.timestamp_ns is None else str(self.timestamp_ns)
        return f"{FORMAT_TAG}{_ROLE_LETTERS[self.role]}{time}"

    def agrees_with(self, failure: _RoleAndTime) -> bool:
        """True when the file's content says what its name says."""
        return failure.role == self.role and failure.timestamp_ns == self.timestamp_ns


def content_listing_key(message: str, stamped_ns: int | None) -> ListingKey:
    """The role and time a reader gives an error document whose message (already ``safe_text``, as
    every reader shows it) is ``message`` and whose valid stamp is ``stamped_ns``.

    The role is what the message says (this plugin's role marker first, else the text patterns of
    ``roles.classify_role``); the time is the stamp, or the true time a victim's testimony gives for
    a moved stamp (``testimony.true_failure_time``).
    """
    return ListingKey(classify_role(message=message), true_failure_time(stamped_ns, message))


def listing_key_for_container(message: str, timestamp: Timestamp | None) -> ListingKey | None:
    """The listing key of a ``ContainerError`` a writer is about to store with ``message`` and
    ``timestamp`` (``None``: no timestamp field); ``None`` when a reader would refuse that time.

    For the writer, which knows the fields it writes and so needs no parse of its own bytes. The
    reader's other checks (a code or a message, a known origin and kind, no foreign fields) are
    about documents this project's writers never produce, so the time is the only one that matters.
    """
    try:
        stamped_ns = document_time_ns(timestamp)
    except ValueError:
        return None
    return content_listing_key(safe_text(message), stamped_ns)


def keyed_file_name(stem: str, key: ListingKey | None) -> str:
    """``<stem>.<token>.pb``, or ``<stem>.pb`` without a key. ``stem`` must start with ``error``."""
    if not stem.startswith(ERROR_FILE_STEM) or "/" in stem:
        raise ValueError(f"an error file's stem must start with {ERROR_FILE_STEM!r} and hold no '/': {stem!r}")
    if key is None:
        return f"{stem}{PROTO_SUFFIX}"
    return f"{stem}.{key.token()}{PROTO_SUFFIX}"


def listing_key_of(name: str) -> ListingKey | None:
    """The key a base name carries, or ``None`` for names written without one."""
    match = _KEYED_NAME.match(name)
    if match is None:
        return None
    role = _LETTER_ROLES[match["role"]]
    time = None if match["time"] == _NO_TIME else int(match["time"])
    return ListingKey(role, time)
