"""Turn a :class:`ReadResult` into the reader's output formats: JSON (stable, for scripts), a rich
table (for people) and the serialized ``ExecutionError`` (for a Go caller).

The JSON shape is part of the interface (``docs/design.md``, "Formats"): change it
only together with that page.
"""

from __future__ import annotations

import re
import sys
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from backend_reader.documents import ErrorKind, FailureRecord
from backend_reader.layout import base_name
from backend_reader.results import ReadResult
from rootcause_core.safe_text import safe_text
from rootcause_core.timeline import TimelineEntry, build_timeline, format_offset, span_s, text_bar
from rootcause_core.timestamps import from_protobuf, rfc3339_ns, rfc3339_ns_or_none

ROOT_CAUSE_ROLE = "root-cause"
_FIRST_LINE_CHARS = 120
#: Characters of the text time axis in the table (the Deck draws the same layout as SVG).
TIMELINE_WIDTH = 16


def failure_role(result: ReadResult, index: int) -> str:
    """``root-cause`` for the failure reported as the task's error, else its own role."""
    return ROOT_CAUSE_ROLE if index == 0 else str(result.failures[index].role)


def to_json_dict(result: ReadResult) -> dict[str, Any]:
    """The documented JSON shape: is_error, error (or null), failures, skipped."""
    error: dict[str, Any] | None = None
    if result.is_error:
        outcome = result.execution_error()
        proto = outcome.execution_error
        error = {
            "code": proto.code,
            "message": proto.message,
            "kind": ErrorKind(type(proto).ErrorKind.Name(proto.kind)).value,
            "worker": proto.worker,
            "timestamp": _proto_time(proto),
            "error_uri": proto.error_uri,
            "is_recoverable": outcome.is_recoverable,
        }
    return {
        "is_error": result.is_error,
        "error": error,
        "failures": [
            {
                "worker": failure.worker,
                "timestamp": rfc3339_ns_or_none(failure.timestamp_ns),
                "code": failure.code,
                "kind": failure.kind.value,
                "is_recoverable": failure.recoverable,
                "role": failure_role(result, index),
                "error_uri": failure.error_uri,
            }
            for index, failure in enumerate(result.failures)
        ],
        "skipped": [{"error_uri": skip.error_uri, "reason": skip.reason} for skip in result.skipped],
    }


def to_proto_bytes(result: ReadResult) -> bytes:
    """Serialized ``flyteidl.core.ExecutionError`` of the task's error; no bytes when none."""
    if not result.is_error:
        return b""
    return result.execution_error().execution_error.SerializeToString(deterministic=True)


def table_console() -> Console:
    """A console for the table: the terminal's width, or a wide one for pipes and CI logs (rich
    would fall back to 80 columns and fold every cell)."""
    return Console(width=None if sys.stdout.isatty() else 200)


def print_table(result: ReadResult, console: Console) -> None:
    """All failures, root cause marked, then the skipped files and a one-line verdict."""
    if not result.is_error:
        console.print(Text(f"No error files under {result.output_prefix}: the task did not fail."))
        return
    if result.failures:
        table = Table(title=Text(f"Failures under {result.output_prefix} (root cause first)"))
        columns = ("#", "role", "worker", "rank", "time (UTC)", "offset", "timeline", "kind", "recoverable",
                   "message", "file")
        for column in columns:
            table.add_column(column, overflow="fold", no_wrap=column == "timeline")
        entries = build_timeline(result.failures)
        span = span_s(entries)
        for index, (failure, entry) in enumerate(zip(result.failures, entries, strict=True)):
            table.add_row(*_row(result, index, failure, entry, span), style="bold red" if index == 0 else None)
        console.print(table)
    if result.skipped:
        skipped = Table(title="Skipped error files")
        skipped.add_column("file", overflow="fold")
        skipped.add_column("reason", overflow="fold")
        for skip in result.skipped:
            skipped.add_row(Text(safe_text(skip.error_uri)), Text(safe_text(skip.reason)))
        console.print(skipped)
    outcome = result.execution_error()
    proto = outcome.execution_error
    verdict = Text("Task error: ", style="bold")
    verdict.append(safe_text(f"{proto.code} from {proto.worker or 'unknown worker'} ({proto.error_uri or 'no file'})"))
    console.print(verdict)


def _row(result: ReadResult, index: int, failure: FailureRecord, entry: TimelineEntry, span: float) -> list[Text]:
    """Cells as ``Text``: messages start with ``[root cause]``, which rich would read as markup; every
    cell escaped (``safe_text``), so no control sequence reaches the terminal."""
    role = failure_role(result, index)
    cells = [
        str(index + 1),
        "★ root cause" if role == ROOT_CAUSE_ROLE else role,
        failure.worker or "-",
        "-" if failure.global_rank is None else str(failure.global_rank),
        rfc3339_ns_or_none(failure.timestamp_ns) or "unknown",
        format_offset(entry.offset_s),
        text_bar(entry, span, width=TIMELINE_WIDTH),
        failure.kind.value,
        "yes" if failure.recoverable else "no",
        _first_line(failure.message),
        base_name(failure.error_uri),
    ]
    return [Text(safe_text(cell)) for cell in cells]


# A report of this plugin: "[root cause] rank 3 (...) on worker w (...) failed at <time> (<source>): <what>".
# Rank, worker and time have their own columns, so the message column shows only <what>.
_REPORT_SUMMARY_RE = re.compile(r"^\[(?:root cause|victim)\] .*? failed at \S+ \(\w+\): (.*)$")


def _first_line(message: str) -> str:
    line = message.strip().split("\n", 1)[0]
    summary = _REPORT_SUMMARY_RE.match(line)
    if summary:
        line = summary.group(1)
    return line if len(line) <= _FIRST_LINE_CHARS else line[: _FIRST_LINE_CHARS - 1] + "…"


def _proto_time(proto: Any) -> str | None:
    if not proto.HasField("timestamp"):
        return None
    return rfc3339_ns(from_protobuf(proto.timestamp))
