"""Say a thing once per key, from any thread, without a lock.

Why: a line worth logging (a verdict, a bad store value) is met again and again, by several
threads: it must be said the first time only. :meth:`SayOnce.first` claims a key with one
``dict.setdefault(key, token)`` and wins only if its own fresh token is the one stored. That call is
one operation on the dictionary (atomic in CPython: under the GIL, or the dictionary's own lock in
free-threaded builds; the keys are strings and other built-ins, whose hash and comparison run no
Python code), so of threads racing on a key exactly one sees its token back.

It lives beside the seams because they may import nothing else of ours (``tests/test_architecture.py``),
and everything else may import them.
"""

from __future__ import annotations

from collections.abc import Hashable


class SayOnce:
    """The keys said so far; ``most``: how many it keeps at most (after that, nothing is said again:
    keys a forger can choose must not grow the memory). Racing threads may pass ``most`` by one
    key each, no more."""

    def __init__(self, most: int | None = None) -> None:
        self.most = most
        self._said: dict[Hashable, object] = {}

    def first(self, key: Hashable) -> bool:
        """Whether this is the first call for ``key`` (``True`` exactly once per key, whatever the
        threads); ``False`` once ``most`` keys were said."""
        if self.most is not None and len(self._said) >= self.most:
            return False
        token = object()
        return self._said.setdefault(key, token) is token

    def forget(self) -> None:
        """Say every key again (for tests)."""
        self._said.clear()
