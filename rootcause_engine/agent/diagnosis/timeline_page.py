"""The failure timeline as a page: self-contained HTML with an inline SVG, no scripts.

What people see next to the error, in each front-end's own place for it (flytekit's Deck,
Flyte 2's report): every worker's failure on one time axis with the root cause marked, and the
soft restarts the job went through. Layout comes from ``rootcause_core.timeline`` (shared with
the CLI table); this module only draws, and publishes nothing.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from rootcause_core.safe_text import safe_text
from rootcause_core.timeline import ROOT_CAUSE, TimelineEntry, build_timeline, format_offset, span_s
from rootcause_engine.agent.diagnosis.failures import WorkerFailure
from rootcause_engine.agent.diagnosis.pipeline import RestartRow
from rootcause_engine.agent.diagnosis.report import describe_ending, format_time

_COLORS = {ROOT_CAUSE: "#d62728", "candidate": "#ff7f0e", "victim": "#7f7f7f"}
_ROW_H, _LEFT, _RIGHT, _TOP = 28, 230, 40, 40
_AXIS_W = 520


def _html(text: str) -> str:
    """Text for the page: escaped for HTML after ``safe_text`` (HTML has no way to show a NUL)."""
    return html.escape(safe_text(text))


def timeline_svg(entries: Sequence[TimelineEntry]) -> str:
    """An SVG of the entries: one row each, a marker at its time offset, the root cause marked."""
    span = span_s(entries) or 1e-3
    height = _TOP + _ROW_H * len(entries) + 30
    width = _LEFT + _AXIS_W + _RIGHT
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'role="img" aria-label="failure timeline">',
        f'<line x1="{_LEFT}" y1="{height - 24}" x2="{_LEFT + _AXIS_W}" y2="{height - 24}" stroke="#333"/>',
    ]
    legend_x = _LEFT
    for role, text in ((ROOT_CAUSE, "root cause"), ("candidate", "other independent failure"), ("victim", "victim")):
        parts.append(
            f'<circle cx="{legend_x + 5}" cy="12" r="5" fill="{_COLORS[role]}"/>'
            f'<text x="{legend_x + 14}" y="16" font-size="11">{text}</text>'
        )
        legend_x += 30 + 7 * len(text)
    for tick in range(5):
        x = _LEFT + _AXIS_W * tick / 4
        parts.append(
            f'<text x="{x:.1f}" y="{height - 8}" font-size="11" text-anchor="middle">'
            f"+{span * tick / 4 * 1000:.0f} ms</text>"
        )
    for row, entry in enumerate(entries):
        y = _TOP + row * _ROW_H
        color = _COLORS.get(entry.role, "#1f77b4")
        label = _html(entry.label)
        parts.append(f'<text x="{_LEFT - 10}" y="{y + 4}" font-size="12" text-anchor="end">{label}</text>')
        parts.append(f'<line x1="{_LEFT}" y1="{y}" x2="{_LEFT + _AXIS_W}" y2="{y}" stroke="#eee"/>')
        if entry.offset_s is None:
            parts.append(f'<text x="{_LEFT + _AXIS_W + 8}" y="{y + 4}" font-size="12">?</text>')
            continue
        x = _LEFT + _AXIS_W * entry.offset_s / span
        title = _html(f"{entry.role}: {entry.summary} ({format_offset(entry.offset_s)})")
        if entry.role == ROOT_CAUSE:
            parts.append(
                f'<g class="root-cause"><title>{title}</title>'
                f'<circle cx="{x:.1f}" cy="{y}" r="8" fill="{color}"/>'
                f'<text x="{x + 12:.1f}" y="{y - 9}" font-size="11" fill="{color}">root cause</text></g>'
            )
        else:
            parts.append(
                f'<g class="{entry.role}"><title>{title}</title>'
                f'<circle cx="{x:.1f}" cy="{y}" r="5" fill="{color}"/></g>'
            )
    parts.append("</svg>")
    return "".join(parts)


def timeline_html(failures: Sequence[WorkerFailure]) -> str:
    """The Deck's HTML: the SVG timeline and a table of the failures, root cause first."""
    summaries = [describe_ending(f) for f in failures]
    entries = build_timeline(failures, summaries)
    rows = []
    for entry, failure in zip(entries, failures, strict=True):
        cls = ' class="root-cause"' if entry.role == ROOT_CAUSE else ""
        rows.append(
            f"<tr{cls}><td>{_html(entry.role)}</td><td>{_html(entry.label)}</td>"
            f"<td>{_html(format_time(failure.timestamp_ns))}</td>"
            f"<td>{_html(format_offset(entry.offset_s))}</td>"
            f"<td>{_html(failure.time_source.value)}</td><td>{_html(entry.summary)}</td></tr>"
        )
    style = (
        "<style>table.rootcause{border-collapse:collapse;font-family:sans-serif;font-size:13px}"
        "table.rootcause td,table.rootcause th{border:1px solid #ddd;padding:4px 8px;text-align:left}"
        "tr.root-cause{background:#fde0e0;font-weight:bold}</style>"
    )
    header = "<tr><th>role</th><th>worker</th><th>time (UTC)</th><th>offset</th><th>time from</th><th>what</th></tr>"
    return (
        f"{style}<h3>Failure timeline</h3>{timeline_svg(entries)}"
        f'<table class="rootcause">{header}{"".join(rows)}</table>'
    )


def restarts_html(rows: Sequence[RestartRow]) -> str:
    """A table of soft-restart changes: (time ns, node, what happened, reason)."""
    body = "".join(
        f"<tr><td>{_html(format_time(at))}</td><td>{_html(node)}</td><td>{_html(what)}</td><td>{_html(reason)}</td></tr>"
        for at, node, what, reason in rows
    )
    header = "<tr><th>time (UTC)</th><th>node</th><th>what</th><th>why</th></tr>"
    return f'<h3>Soft restarts</h3><table class="rootcause">{header}{body}</table>'
