"""Failures on a time axis: the layout shared by the CLI table and the Flyte Deck.

Pure: takes failures already in root-cause order (the first one is the root cause) and returns
one entry per failure with its offset from the earliest timed failure, so a person sees at once
who failed first and how the others followed. Text bars for terminals live here too; the HTML/SVG
rendering is the flytekit side's (``flytekitplugins_rootcause.report``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from rootcause_core.ordering import OrderableFailure, Role
from rootcause_core.timestamps import to_seconds

ROOT_CAUSE = "root-cause"
#: How a failure that is not the root cause is labelled on the timeline.
_ROLE_LABELS = {Role.CANDIDATE: "candidate", Role.LOST_POD: "lost-pod", Role.VICTIM: "victim"}


@dataclasses.dataclass(frozen=True)
class TimelineEntry:
    label: str  # "train-worker-1 rank 3"
    offset_s: float | None  # seconds after the earliest timed failure; None when untimed
    role: str  # "root-cause", "candidate" or "victim"
    summary: str  # one line: what happened


def failure_label(worker: str, global_rank: int | None) -> str:
    rank = "" if global_rank is None else f" rank {global_rank}"
    return f"{worker or '?'}{rank}"


def build_timeline(failures: Sequence[OrderableFailure], summaries: Sequence[str] | None = None) -> list[TimelineEntry]:
    """One entry per failure, in the given (root-cause) order."""
    times = [f.timestamp_ns for f in failures if f.timestamp_ns is not None]
    origin = min(times) if times else None
    entries = []
    for index, failure in enumerate(failures):
        offset = None
        if failure.timestamp_ns is not None and origin is not None:
            offset = to_seconds(failure.timestamp_ns - origin)
        role = ROOT_CAUSE if index == 0 else _ROLE_LABELS[failure.role]
        summary = summaries[index] if summaries is not None else ""
        entries.append(TimelineEntry(failure_label(failure.worker, failure.global_rank), offset, role, summary))
    return entries


def span_s(entries: Sequence[TimelineEntry]) -> float:
    """The time the failures spread over (0 when at most one is timed)."""
    offsets = [e.offset_s for e in entries if e.offset_s is not None]
    return max(offsets) if offsets else 0.0


def text_bar(entry: TimelineEntry, span: float, width: int = 24) -> str:
    """``····●·····`` with the marker at the failure's place on the axis (``?`` when untimed)."""
    if entry.offset_s is None:
        return "?".center(width)
    position = 0 if span <= 0 else round(entry.offset_s / span * (width - 1))
    marker = "★" if entry.role == ROOT_CAUSE else ("✕" if entry.role == "victim" else "●")
    return "·" * position + marker + "·" * (width - 1 - position)


def format_offset(offset_s: float | None) -> str:
    return "?" if offset_s is None else f"+{offset_s * 1000:.1f} ms"
