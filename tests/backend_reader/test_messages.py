"""Cutting long error messages as propeller does (``backend_reader.messages``): whole up to the limit, else
head and tail around the marker, always valid UTF-8."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from backend_reader.messages import MAX_MESSAGE_BYTES, TRUNCATION_INDICATOR, cut_message


def test_message_cut_keeps_head_and_tail_like_propeller() -> None:
    message = "HEAD" + "x" * 300_000 + "TAIL"
    cut = cut_message(message, 100 * 1024)
    assert cut.startswith("HEAD") and cut.endswith("TAIL")
    assert TRUNCATION_INDICATOR in cut
    assert len(cut.encode()) <= 100 * 1024 + len(TRUNCATION_INDICATOR) + 2


def test_message_cut_leaves_short_messages_and_keeps_utf8_valid() -> None:
    assert cut_message("short") == "short"
    cut = cut_message("é" * 1000, 101)  # 2-byte characters, odd limit: the cuts split characters
    assert cut.encode("utf-8").decode("utf-8") == cut
    assert cut.startswith("é" * 25) and cut.endswith("é" * 25)


def test_the_default_limit_is_propellers_100_kib() -> None:
    assert MAX_MESSAGE_BYTES == 100 * 1024
    assert cut_message("a" * MAX_MESSAGE_BYTES) == "a" * MAX_MESSAGE_BYTES
    assert TRUNCATION_INDICATOR in cut_message("a" * (MAX_MESSAGE_BYTES + 1))


def test_the_limit_counts_utf8_bytes_not_characters() -> None:
    fits = "€" * 10  # 30 bytes
    assert cut_message(fits, 30) is fits
    assert cut_message(fits, 29) == f"{'€' * 4}\n{TRUNCATION_INDICATOR}\n{'€' * 4}"  # 14 bytes each side


def test_the_cut_is_head_indicator_tail_on_their_own_lines() -> None:
    assert cut_message("0123456789", 4) == f"01\n{TRUNCATION_INDICATOR}\n89"
    assert cut_message("0123456789", 5) == f"01\n{TRUNCATION_INDICATOR}\n89"  # an odd byte goes unused


# lone surrogates excluded: a message reaches the cut through ``safe_text``, which escapes them
@given(st.text(st.characters(exclude_characters="\n", exclude_categories=("Cs",)), max_size=400), st.integers(0, 300))
def test_a_long_message_keeps_whole_characters_of_its_head_and_tail_within_half_the_limit_each(
    message: str, limit: int
) -> None:
    cut = cut_message(message, limit)
    if len(message.encode()) <= limit:
        assert cut == message
        return
    head, marker, tail = cut.split("\n")
    assert marker == TRUNCATION_INDICATOR
    assert message.startswith(head) and message.endswith(tail)
    assert len(head.encode()) <= limit // 2 and len(tail.encode()) <= limit // 2
    assert len(head.encode()) > limit // 2 - 4 and len(tail.encode()) > limit // 2 - 4  # only a split character lost
