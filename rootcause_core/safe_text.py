"""The one rule for text that crosses a process or file boundary: never refuse it, make it safe.

A user's exception may hold any character and any size. Its message travels from a worker's error
file to the pod's ``ErrorDocument``, propeller, the reader and the Deck. One unencodable character
could make a step refuse the whole document, and the root cause would be lost. So no step refuses a
text. Every writer and reader passes it through here instead: it is escaped where it cannot be shown,
and cut to size keeping both ends. The readers' limits live here too, so writers size texts against
them. ``docs/messages.md`` lists the escapes and the sizes.
"""

from __future__ import annotations

import re
import traceback

#: Size past which this plugin's agent refuses to read a worker's error file (the plugin's worker
#: recorder); the worker sizes its file to stay below it, whatever the exception holds.
MAX_WORKER_ERROR_FILE_BYTES = 4 * 1024 * 1024
#: Each of the worker error file's two texts (message, traceback), in UTF-8. JSON with
#: ``ensure_ascii`` writes a character in at most 3x its UTF-8 size once :func:`safe_text` removed
#: the controls, so both together stay under 3 MiB: inside :data:`MAX_WORKER_ERROR_FILE_BYTES`.
MAX_WORKER_TEXT_BYTES = 512 * 1024
#: propeller's ``MaxErrorMessageLength``: it cuts longer messages (head and tail) when it records
#: them, so a report that fits is shown whole.
MAX_REPORT_BYTES = 100 * 1024
#: propeller's default payload limit for a file it reads (``GetLimitMegabytes``, 2 MB); a larger
#: ``error*.pb`` fails the whole aggregated read.
MAX_DOCUMENT_BYTES = 2 * 1024 * 1024
#: A summary line (the first line of a failure's message in a report or a Deck row).
MAX_LINE_BYTES = 2 * 1024
#: The root cause's traceback inside a report: room for the innermost frames and the exception line,
#: leaving the rest of :data:`MAX_REPORT_BYTES` for the list of other failures.
MAX_REPORT_TRACEBACK_BYTES = 48 * 1024

#: Joins the head and the tail of a cut text.
CUT_MARKER = " ... <cut> ... "

_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
_UNSAFE_IN_LINE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def _escape(code: int) -> str:
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


# str.translate tables (C speed on megabytes of controls): every unsafe code point to its escape.
_UNSAFE_CODES = [*range(0x00, 0x20), *range(0x7F, 0xA0), *range(0xD800, 0xE000)]
_LINE_TABLE = {code: _escape(code) for code in _UNSAFE_CODES}
_TEXT_TABLE = {code: escape for code, escape in _LINE_TABLE.items() if code not in (0x09, 0x0A)}


def safe_text(text: str) -> str:
    """``text`` with control characters (but tab and newline) and lone surrogates escaped.

    The result is valid UTF-8, shows no control sequence on a terminal or in HTML, and is its own
    :func:`safe_text` (escapes are plain backslash text).
    """
    if _UNSAFE.search(text) is None:
        return text
    return text.translate(_TEXT_TABLE)


def safe_line(text: str) -> str:
    """:func:`safe_text` for one-line fields (worker and host names): tab and newline escaped too, so
    a name can never break the report's first line, which readers parse."""
    if _UNSAFE_IN_LINE.search(text) is None:
        return text
    return text.translate(_LINE_TABLE)


def utf8_size(text: str) -> int:
    """Bytes of ``text`` in UTF-8 (lone surrogates counted as 3, as ``surrogatepass`` writes them)."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-8", errors="surrogatepass"))


def split_head_tail(text: str, head_bytes: int, tail_bytes: int) -> tuple[str, str]:
    """The first ``head_bytes`` and the last ``tail_bytes`` of ``text`` in UTF-8, each a whole text.

    A character split by a cut is dropped, so both parts are valid text (Go slices bytes and may
    leave half a character; propeller's cut is otherwise the same).
    """
    data = text.encode("utf-8", errors="surrogatepass")
    head = data[: max(head_bytes, 0)].decode("utf-8", errors="ignore")
    tail = data[len(data) - max(tail_bytes, 0) :].decode("utf-8", errors="ignore") if tail_bytes > 0 else ""
    return head, tail


def head_and_tail(text: str, limit_bytes: int, marker: str = CUT_MARKER) -> str:
    """``text`` unchanged when it fits ``limit_bytes`` (UTF-8), else its head, ``marker``, its tail.

    The result never exceeds ``limit_bytes`` (unlike propeller's cut, which adds its marker on top),
    so a later cut to the same limit leaves it alone.
    """
    if len(text) * 4 <= limit_bytes or utf8_size(text) <= limit_bytes:
        return text
    room = limit_bytes - utf8_size(marker)
    if room <= 0:
        head, _ = split_head_tail(text, limit_bytes, 0)
        return head
    head, tail = split_head_tail(text, room - room // 2, room // 2)
    return f"{head}{marker}{tail}"


def bounded_text(text: str, limit_bytes: int) -> str:
    """:func:`safe_text`, then :func:`head_and_tail`: what a writer stores for an arbitrary text.

    A longer text is first reduced to its first and last ``limit_bytes // 2 + 1`` characters (every
    character is at least one byte, so the final head and tail lie inside them, and the joined
    text still exceeds the limit): escaping megabytes only to drop them would be slow.
    """
    keep = limit_bytes // 2 + 1
    if len(text) > 2 * keep:
        text = text[:keep] + text[-keep:]
    return head_and_tail(safe_text(text), limit_bytes)


def first_line(text: str, limit_bytes: int = MAX_LINE_BYTES) -> str:
    """The first non-blank line of ``text``, safe and bounded (head and tail of a huge line)."""
    stripped = text.strip()
    line = stripped.split("\n", 1)[0] if stripped else text
    return bounded_text(line, limit_bytes)


def safe_str(value: object) -> str:
    """``str(value)``, or a description of why it failed: a ``__str__`` that raises must not hide
    the failure it was meant to describe."""
    try:
        return str(value)
    except Exception as error:  # any exception from user code
        try:
            return f"<{type(value).__name__}.__str__ raised {type(error).__name__}>"
        except Exception:
            return "<__str__ raised>"


def exception_summary(error: BaseException) -> str:
    """``Type: message`` for ``error`` (just ``Type`` when the message is empty), never raising."""
    text = safe_str(error)
    name = type(error).__name__
    return f"{name}: {text}" if text else name


def format_traceback(error: BaseException) -> str:
    """The traceback Python would print for ``error`` (chained and grouped ones included), or the
    summary alone when formatting itself fails."""
    try:
        return "".join(traceback.format_exception(error))
    except Exception:  # a broken __str__ or __traceback__ of user code
        return exception_summary(error) + "\n"
