"""The text-safety rule every boundary uses (``rootcause_core.safe_text``): escape, never refuse;
bound size keeping head and tail; describe exceptions whose ``__str__`` raises."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rootcause_core.safe_text import (
    CUT_MARKER,
    exception_summary,
    first_line,
    format_traceback,
    head_and_tail,
    safe_str,
    safe_text,
    utf8_size,
)

any_text = st.text(alphabet=st.characters(exclude_categories=()), max_size=300)


def test_controls_and_lone_surrogates_become_visible_escapes() -> None:
    assert safe_text("bad record \x00\x07\x08 end") == "bad record \\x00\\x07\\x08 end"
    assert safe_text("half \udc80 surrogate") == "half \\udc80 surrogate"
    assert safe_text("\x1b[31mred\x1b[0m\r\x7f\x85") == "\\x1b[31mred\\x1b[0m\\x0d\\x7f\\x85"
    kept = "tab\tand\nnewline, émoji 😀, שלום, 中文"
    assert safe_text(kept) is kept


@settings(max_examples=200, deadline=None)
@given(any_text)
def test_safe_text_is_valid_utf8_and_its_own_fixed_point(text: str) -> None:
    safe = safe_text(text)
    safe.encode("utf-8")  # no lone surrogate left
    assert all(ch in "\t\n" or not (ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F) for ch in safe)
    assert safe_text(safe) == safe


@settings(max_examples=200, deadline=None)
@given(any_text, st.integers(min_value=1, max_value=400))
def test_head_and_tail_never_exceeds_the_limit_and_keeps_both_ends(text: str, limit: int) -> None:
    safe = safe_text(text)
    cut = head_and_tail(safe, limit)
    assert utf8_size(cut) <= limit
    assert head_and_tail(cut, limit) == cut
    if utf8_size(safe) <= limit:
        assert cut == safe
    elif limit >= 64:
        head, _, tail = cut.partition(CUT_MARKER)
        assert safe.startswith(head) and safe.endswith(tail) and len(head) > 0 and len(tail) > 0


def test_huge_text_keeps_head_and_tail() -> None:
    text = "ValueError: HEAD" + "x" * 5_000_000 + "TAIL"
    cut = head_and_tail(text, 1024)
    assert cut.startswith("ValueError: HEAD") and cut.endswith("TAIL") and len(cut) <= 1024
    assert first_line("\n\n" + text + "\nsecond").startswith("ValueError: HEAD")


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no")


def test_an_exception_whose_str_raises_is_still_described() -> None:
    error = _Unprintable()
    assert safe_str(error) == "<_Unprintable.__str__ raised RuntimeError>"
    assert exception_summary(error).startswith("_Unprintable: <")
    assert exception_summary(ValueError()) == "ValueError"
    try:
        raise error
    except _Unprintable as raised:
        assert "_Unprintable" in format_traceback(raised)
