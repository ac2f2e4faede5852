"""Which error files ``read_error`` downloads, batch by batch: the pure half of the root-cause read.

Reading every error file of a large job costs one request per file. But the plugin's file names carry
a listing key, the failure's role and time. So the plan reads the unkeyed files and the lowest keyed
group first, and more only when needed. If a file disagrees with its own name, it reads everything
left. The result equals reading every file, usually with one listing and one download.
``docs/backend_reader.md`` gives the steps.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable

from backend_reader.documents import FailureRecord
from backend_reader.storage import ObjectInfo
from rootcause_core.error_files import ListingKey, listing_key_of
from rootcause_core.ordering import role_time_key

Listed = tuple[str, ObjectInfo]


@dataclasses.dataclass
class _Group:
    key: ListingKey
    files: list[Listed]


class RootCauseReadPlan:
    """Hands out batches of listed files to read; feed it what was read to get the next batch."""

    def __init__(self, listed: Iterable[Listed]) -> None:
        self._unkeyed: list[Listed] = []
        self._keys: dict[str, ListingKey] = {}
        groups: dict[tuple[int, int, int], _Group] = {}
        for uri, info in listed:
            key = listing_key_of(info.name)
            if key is None:
                self._unkeyed.append((uri, info))
                continue
            self._keys[uri] = key
            groups.setdefault(key.sort_key, _Group(key, [])).files.append((uri, info))
        self._groups = collections.deque(groups[sort_key] for sort_key in sorted(groups))

    def next_batch(self, just_read: Iterable[FailureRecord], best: FailureRecord | None) -> list[Listed]:
        """What to read next, given the failures the last batch gave and the best failure so far.

        The first call (nothing read, no best) gives the unkeyed files and the lowest keyed group.
        Later calls give everything left if a failure just read disagrees with its own file's name;
        otherwise the next group if it may still hold the root cause; otherwise nothing: the root
        cause is known.
        """
        if self._contradicted(just_read):
            return self._rest()
        batch, self._unkeyed = self._unkeyed, []
        if self._groups and self._next_group_may_win(best):
            batch += self._groups.popleft().files
        return batch

    def _next_group_may_win(self, best: FailureRecord | None) -> bool:
        """False once the best failure read sorts before the next group's role and time."""
        return best is None or role_time_key(best.role, best.timestamp_ns) >= self._groups[0].key.sort_key

    def _rest(self) -> list[Listed]:
        batch = [item for group in self._groups for item in group.files]
        self._groups.clear()
        return batch

    def _contradicted(self, failures: Iterable[FailureRecord]) -> bool:
        for failure in failures:
            key = self._keys.get(failure.error_uri)
            if key is not None and not key.agrees_with(failure):
                return True
        return False
