"""Collect parsed error files into an ordered result, with memory bounded per failure.

A job may have thousands of workers, each with a message of up to 100 KiB. Only the root cause's full
message is reported. So the collector keeps the full message of the best failure so far. It shortens
every other one as soon as it cannot be the root cause. It is pure: reads arrive in any order, and the
result does not depend on that order. Our ``error.pb`` copies one worker's document. So it counts only
when no other file has its content. ``docs/backend_reader.md`` has the details.
"""

from __future__ import annotations

import dataclasses

from backend_reader.documents import FailureRecord, SkippedFile
from backend_reader.layout import ERROR_FILE_NAME, join
from backend_reader.messages import cut_message
from backend_reader.results import ReadResult
from rootcause_core.ordering import order_failures, root_cause_key

DEFAULT_SUMMARY_BYTES = 4 * 1024


@dataclasses.dataclass
class Collector:
    """Accumulates the :class:`FailureRecord` and :class:`SkippedFile` outcomes of one read."""

    output_prefix: str
    error_files: int
    summary_bytes: int = DEFAULT_SUMMARY_BYTES
    _failures: dict[str, FailureRecord] = dataclasses.field(default_factory=dict)
    _fingerprints: set[str] = dataclasses.field(default_factory=set)
    _skipped: list[SkippedFile] = dataclasses.field(default_factory=list)
    _best: FailureRecord | None = None
    _single_writer_copy: FailureRecord | None = None

    def add(self, outcome: FailureRecord | SkippedFile) -> None:
        if isinstance(outcome, SkippedFile):
            self._skipped.append(outcome)
        elif outcome.error_uri == join(self.output_prefix, ERROR_FILE_NAME):
            self._single_writer_copy = outcome
        else:
            self._insert(outcome)

    @property
    def best(self) -> FailureRecord | None:
        """The root cause among the files added so far (``error.pb``'s copy aside)."""
        return self._best

    def skip(self, error_uri: str, reason: str) -> None:
        self.add(SkippedFile(error_uri, reason))

    def result(self) -> ReadResult:
        """Failures in root-cause order, skipped files by URI."""
        copy = self._single_writer_copy
        if copy is not None and copy.fingerprint not in self._fingerprints:
            self._insert(copy)
        self._single_writer_copy = None
        return ReadResult(
            output_prefix=self.output_prefix,
            failures=tuple(order_failures(self._failures.values())),
            skipped=tuple(sorted(self._skipped, key=lambda skip: skip.error_uri)),
            error_files=self.error_files,
        )

    def _insert(self, failure: FailureRecord) -> None:
        self._fingerprints.add(failure.fingerprint)
        best = self._best
        if best is None or root_cause_key(failure) < root_cause_key(best):
            if best is not None:
                self._failures[best.error_uri] = self._summarized(best)
            self._best = failure
            self._failures[failure.error_uri] = failure
        else:
            self._failures[failure.error_uri] = self._summarized(failure)

    def _summarized(self, failure: FailureRecord) -> FailureRecord:
        short = cut_message(failure.message, self.summary_bytes)
        return failure if short is failure.message else dataclasses.replace(failure, message=short)
