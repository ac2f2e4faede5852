"""Saying a thing once per key without a lock (``upstream/say_once.py``)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator

import pytest

from rootcause_engine.upstream.say_once import SayOnce


@pytest.fixture
def often_switching_threads() -> Iterator[None]:
    """Switch threads as often as the interpreter allows, so that the race is run, not dodged."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


@pytest.mark.usefixtures("often_switching_threads")
def test_of_threads_racing_to_announce_a_line_exactly_one_says_it() -> None:
    """Every key is claimed by exactly one of the threads that race for it, whichever wins."""
    threads_count, keys = 16, [f"line {n}" for n in range(200)]
    said, start = SayOnce(), threading.Barrier(threads_count)
    wins: list[list[str]] = [[] for _ in range(threads_count)]

    def announce(index: int) -> None:
        start.wait()
        wins[index].extend(key for key in keys if said.first(key))

    threads = [threading.Thread(target=announce, args=(index,)) for index in range(threads_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(key for won in wins for key in won) == sorted(keys)


def test_a_key_is_said_once_until_forgotten_and_nothing_past_the_most_kept() -> None:
    said = SayOnce(most=2)
    assert [said.first(key) for key in ("a", "a", "b", "c", "a")] == [True, False, True, False, False]
    said.forget()
    assert said.first("c") and said.first("a") and not said.first("b")
