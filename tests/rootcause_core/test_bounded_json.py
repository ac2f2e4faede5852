"""JSON from another process is parsed within a size and a depth, never with a RecursionError.

``rootcause_core/bounded_json.py``; the testimony reader uses it.
"""

from __future__ import annotations

import json

import pytest

from rootcause_core.bounded_json import MAX_DEPTH, RefusedJson, loads_bounded, too_deep
from rootcause_core.testimony import TESTIMONY_TAG, read_testimony

#: Far deeper than Python's recursion limit: ``json.loads`` alone raises RecursionError on these.
BOMBS = ["[" * 100_000, '{"a":' * 50_000, "[" * 5000 + "]" * 5000, '[{"a":[' * 3000]


@pytest.mark.parametrize("bomb", BOMBS, ids=["open-arrays", "open-objects", "closed-arrays", "mixed"])
def test_a_nesting_bomb_is_refused_as_a_value_error_before_parsing(bomb: str) -> None:
    with pytest.raises(RecursionError):  # the hazard: not a ValueError, so callers did not catch it
        json.loads(bomb)
    with pytest.raises(RefusedJson, match="nested more than"):
        loads_bounded(bomb, max_bytes=1 << 20)


def test_brackets_inside_strings_and_escapes_do_not_count() -> None:
    text = json.dumps({"message": "[" * 100 + '\\"[{' * 50, "list": [[["x"]]], "quote": '"]]]"'})
    assert not too_deep(text, 4) and too_deep(text, 3)  # the object, then three lists
    assert loads_bounded(text, max_bytes=1 << 16)["list"] == [[["x"]]]


def test_exactly_the_depth_cap_parses_one_more_does_not() -> None:
    at_cap = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert not too_deep(at_cap, MAX_DEPTH) and too_deep(at_cap, MAX_DEPTH - 1)
    assert loads_bounded(at_cap, max_bytes=1 << 10)
    with pytest.raises(RefusedJson):
        loads_bounded("[" + at_cap + "]", max_bytes=1 << 10)


@pytest.mark.parametrize(("value", "reason"), [
    ("[1]" + " " * 100, "more than 64 bytes"),
    ("[\"" + "é" * 40 + "\"]", "more than 64 bytes"),  # 40 characters, 80 bytes
    (b"\xff\xfe", "not UTF-8"),
    ("[NaN]", "NaN"),
    ("[-Infinity]", "Infinity"),
])
def test_too_large_not_utf8_or_not_finite_is_refused(value: str | bytes, reason: str) -> None:
    with pytest.raises(RefusedJson, match=reason):
        loads_bounded(value, max_bytes=64)


def test_text_that_is_not_json_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        loads_bounded("[1,", max_bytes=64)


def test_a_testimony_line_nested_thousands_deep_is_no_testimony_not_a_crash() -> None:
    assert read_testimony("[victim] rank 0 ...\n" + TESTIMONY_TAG + "[" * 4000) is None
    line = TESTIMONY_TAG + json.dumps({"failed_at_ns": 5, "lost": [[1, "pod-1", 3]]})
    assert read_testimony("[victim] x\n" + line) is not None
