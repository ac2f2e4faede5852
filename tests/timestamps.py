"""Checks on failure times that hold however slow the machine is."""

from __future__ import annotations

NS_PER_S = 1_000_000_000


def assert_sub_second(*timestamps_ns: int) -> None:
    """The times keep their sub-second part: not cut to whole seconds somewhere on the way.

    Two failures a few milliseconds apart are told apart only by that part; how far apart they
    really were depends on the machine's load, so tests check the precision, not the gap.
    A time that is a whole second by chance happens once in 10^9; all of them at once, never.
    """
    assert any(t % NS_PER_S for t in timestamps_ns), f"whole seconds only: {timestamps_ns}"
