"""An error file's role and time, written into its name, so one listing finds the root cause.

Why: propeller needs one answer, the root cause, but a job of thousands of workers leaves thousands
of error files, and reading each one is a request (tens of ms on a real object store, and
fake-gcs-server's memory backend spends milliseconds of CPU on each at 10,000 objects). The rule's
first two steps, role and time, decide the order for everything but exact ties, and a listing
already returns every name. So the plugin's writer puts them in the name it gives each per-worker
file, and the reader (``RemoteFileOutputReader.read_error``) downloads only the files that can
still win: those without such a name (older writers, ``error.pb``) and the lowest role-and-time
group; more groups only while none of those could be read.

Format: ``<stem>.rc1<role><time>.pb``, where ``<stem>`` is ``error-<sanitized worker>-<uuid hex>``
(``error-<uuid hex>`` for flytekit's own files), ``rc1`` names this format and its version, role is
``c`` (candidate) or ``v`` (victim), and time is the error's time in ns since the epoch (signed)
or ``n`` when it has none. For example
``error-train-worker-1-3f2b...e9.rc1c1790000000123456789.pb``. Every name that does not end so
(flytekit's ``error-<uuid>.pb`` ends in 32 hex digits) simply has no listing key and is read.

Trust: the key is computed by :func:`listing_key_for` from the very bytes being written, with the
same parsing the reader applies (:func:`backend_reader.documents.parse_error_document`), so a name
and its content agree by construction. The reader still checks every file it reads against its
name and falls back to reading everything if one disagrees. A reader whose role rules change must
bump the version, so that older names are read again instead of trusted.
"""

from __future__ import annotations

import dataclasses
import re

from backend_reader.documents import FailureRecord, parse_error_document
from backend_reader.layout import ERROR_FILE_STEM, PROTO_SUFFIX
from backend_reader.ordering import Role, role_time_key

FORMAT_TAG = "rc1"
_ROLE_LETTERS = {Role.CANDIDATE: "c", Role.VICTIM: "v"}
_NO_TIME = "n"
_KEYED_NAME = re.compile(
    rf"^(?P<stem>{ERROR_FILE_STEM}.*)\.{FORMAT_TAG}(?P<role>[cv])(?P<time>-?[0-9]{{1,21}}|{_NO_TIME})"
    rf"{re.escape(PROTO_SUFFIX)}$"
)


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

    def agrees_with(self, failure: FailureRecord) -> bool:
        """True when the file's content says what its name says."""
        return failure.role == self.role and failure.timestamp_ns == self.timestamp_ns


def listing_key_for(document: bytes) -> ListingKey | None:
    """The key of a serialized ``ErrorDocument``, as the reader will see it; ``None`` when the reader
    would skip the document (then the file gets a plain name and is simply read)."""
    parsed = parse_error_document(document, "")
    if not isinstance(parsed, FailureRecord):
        return None
    return ListingKey(parsed.role, parsed.timestamp_ns)


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
    role = Role.CANDIDATE if match["role"] == "c" else Role.VICTIM
    time = None if match["time"] == _NO_TIME else int(match["time"])
    return ListingKey(role, time)
