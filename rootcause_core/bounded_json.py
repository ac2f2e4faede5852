"""JSON written by another process, parsed within a size and a nesting depth, or refused.

Why: Python's ``json`` parser recurses once per nesting level, so a few kilobytes of ``[`` raise
``RecursionError`` (not ``ValueError``, which is what callers catch) wherever they are parsed; and a
value of many megabytes costs its reader the memory to decode it. The pods read JSON that any other
process could have written: values in the rendezvous store (``rootcause_engine/agent/store_values.py``)
and the testimony line of an error document (:mod:`rootcause_core.testimony`). Both go through
:func:`loads_bounded`: the size is checked before anything is decoded, the depth by one linear scan
that does not recurse, and ``NaN`` or ``Infinity`` (which ``json`` accepts and no writer of ours
emits) is refused. Every refusal is a ``ValueError``.
"""

from __future__ import annotations

import json
import re

#: Deeper than anything this project writes (a pod's word is three levels deep), far below the
#: depth at which the parser would recurse into trouble.
MAX_DEPTH = 16

#: The characters that can change the nesting depth or the string state; the scan visits only these.
_STRUCTURE = re.compile(r'[\[\]{}"\\]')


class RefusedJson(ValueError):
    """The text is too large, nested too deeply, or not the JSON this project writes."""


def loads_bounded(text: str | bytes, *, max_bytes: int, max_depth: int = MAX_DEPTH) -> object:
    """``json.loads(text)`` if ``text`` is at most ``max_bytes`` long (UTF-8) and nests at most
    ``max_depth`` levels; raises :class:`RefusedJson` (a ``ValueError``) otherwise, and
    ``ValueError`` for text that is not JSON."""
    if len(text) > max_bytes:  # a str is at most 4 bytes a character: check its length first, cheaply
        raise RefusedJson(f"{len(text)} characters, more than {max_bytes} bytes")
    if isinstance(text, bytes):
        try:
            text = text.decode()
        except UnicodeDecodeError as error:
            raise RefusedJson(f"not UTF-8: {error}") from None
    elif len(text.encode(errors="surrogatepass")) > max_bytes:
        raise RefusedJson(f"more than {max_bytes} bytes")
    if too_deep(text, max_depth):
        raise RefusedJson(f"nested more than {max_depth} levels deep")
    return json.loads(text, parse_constant=_refuse_constant)


def too_deep(text: str, limit: int) -> bool:
    """Whether arrays and objects in ``text`` nest more than ``limit`` levels (brackets inside
    strings not counted), scanned without recursion and stopped at the first level past ``limit``.
    Text that is not JSON gets some answer, and ``json`` then refuses it on its own."""
    if text.count("[") + text.count("{") <= limit:
        return False  # cannot nest deeper than its opening brackets: no scan needed
    depth = 0
    in_string = False
    escaped_at = -1  # the position of a character a backslash escapes
    for match in _STRUCTURE.finditer(text):
        position, char = match.start(), match.group()
        if position == escaped_at:
            continue
        if in_string:
            if char == "\\":
                escaped_at = position + 1
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > limit:
                return True
        elif char in "]}":
            depth -= 1
    return False


def _refuse_constant(name: str) -> object:
    raise RefusedJson(f"{name} is not a number this project writes")
