"""Cut long error messages the way Flyte's propeller does before it records them.

propeller's event recorder (``events/event_recorder.go``, ``truncateErrorMessage``) keeps an
error message whole up to ``MaxErrorMessageLength`` bytes (meant as 100 KiB) and otherwise keeps
the first half and the last half of that budget joined by ``\\n... <Message Truncated> ...\\n``:
the head says what failed, the tail holds the innermost frames of a traceback. Go slices bytes; we
slice the UTF-8 bytes too and drop a split character at each cut (``safe_text.split_head_tail``),
so the result is valid text.
"""

from __future__ import annotations

from rootcause_core.safe_text import MAX_REPORT_BYTES, split_head_tail, utf8_size

MAX_MESSAGE_BYTES = MAX_REPORT_BYTES
TRUNCATION_INDICATOR = "... <Message Truncated> ..."


def cut_message(message: str, limit_bytes: int = MAX_MESSAGE_BYTES) -> str:
    """Return ``message`` unchanged if it fits ``limit_bytes`` (UTF-8), else its head and tail."""
    if len(message) * 4 <= limit_bytes or utf8_size(message) <= limit_bytes:
        return message
    half = limit_bytes // 2
    head, tail = split_head_tail(message, half, half)
    return f"{head}\n{TRUNCATION_INDICATOR}\n{tail}"
