"""The report as a page: a table and a bar chart, self-contained HTML with inline SVG.

Both front-ends show it: flytekit as a Deck, Flyte 2 as a report tab. No scripts and no external
assets: both are opened from object storage in the console, often without internet access, and a
static page cannot break.
"""

from __future__ import annotations

from html import escape

from rootcause_engine.straggler.decision import FAILED, OK
from rootcause_engine.straggler.report import NodeResult, StragglerReport

_COLORS = {"compute": "#4878d0", "network": "#ee854a"}
_VERDICT_COLORS = {OK: "#2e7d32", FAILED: "#6d6d6d"}
_SLOW_COLOR = "#c62828"


def _fmt(value: float | None, pattern: str) -> str:
    return "-" if value is None else format(value, pattern)


def _table(report: StragglerReport) -> str:
    head = "".join(
        f"<th>{escape(h)}</th>"
        for h in (
            "node",
            "pod",
            "host",
            "workers",
            "groups",
            "compute s",
            "comm s",
            "compute x",
            "network x",
            "verdict",
        )
    )
    rows = []
    for n in report.nodes:
        color = _VERDICT_COLORS.get(n.verdict, _SLOW_COLOR)
        cells = [
            str(n.node_rank),
            escape(n.pod),
            escape(n.host),
            str(n.local_workers),
            escape(" / ".join("{" + ",".join(map(str, g)) + "}" for g in n.groups)),
            " / ".join(_fmt(v, ".4f") for v in n.compute_s),
            " / ".join(_fmt(v, ".4f") for v in n.comm_s),
            _fmt(n.compute_score, ".2f"),
            _fmt(n.comm_score, ".2f"),
            f'<b style="color:{color}">{escape(n.verdict)}</b>'
            + (f"<br><small>{escape(n.error)}</small>" if n.error else ""),
        ]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _chart(nodes: list[NodeResult], thresholds: dict[str, float]) -> str:
    """Grouped bars per node: compute and network score (see ``decision.py``: median trial ratio over every round)."""
    scores = [s for n in nodes for s in (n.compute_score, n.comm_score) if s is not None]
    top = max([1.2, *(t * 1.2 for t in thresholds.values()), *scores])
    bar_w, gap, left, height, plot_h = 18, 14, 40, 220, 170
    width = left + len(nodes) * (2 * bar_w + gap) + gap
    y = lambda v: 20 + plot_h - plot_h * v / top  # noqa: E731 - a tiny local scale
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        f'aria-label="straggler scores per node">',
        f'<line x1="{left}" y1="{y(0):.1f}" x2="{width}" y2="{y(0):.1f}" stroke="#333"/>',
        f'<text x="2" y="{y(1) + 4:.1f}" font-size="10">1x</text>',
    ]
    for kind, threshold in thresholds.items():
        parts.append(
            f'<line x1="{left}" y1="{y(threshold):.1f}" x2="{width}" y2="{y(threshold):.1f}" '
            f'stroke="{_COLORS[kind]}" stroke-dasharray="4 3"><title>{kind} threshold {threshold:g}x</title></line>'
        )
        parts.append(
            f'<text x="2" y="{y(threshold) + 4:.1f}" font-size="10" fill="{_COLORS[kind]}">{threshold:g}x</text>'
        )
    for i, n in enumerate(nodes):
        x0 = left + gap + i * (2 * bar_w + gap)
        for j, (kind, score) in enumerate((("compute", n.compute_score), ("network", n.comm_score))):
            if score is None:
                continue
            x = x0 + j * bar_w
            parts.append(
                f'<rect x="{x}" y="{y(score):.1f}" width="{bar_w - 2}" height="{y(0) - y(score):.1f}" '
                f'fill="{_COLORS[kind]}"><title>node {n.node_rank} {kind}: {score:.2f}x</title></rect>'
            )
        parts.append(
            f'<text x="{x0 + bar_w}" y="{height - 12}" font-size="11" text-anchor="middle">{n.node_rank}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def render_html(report: StragglerReport) -> str:
    """The whole page (a fragment Flyte wraps in its own page)."""
    legend = (
        f'<span style="color:{_COLORS["compute"]}">&#9632; compute</span> '
        f'<span style="color:{_COLORS["network"]}">&#9632; network</span> '
        "(time / median of the other nodes, per trial, median over both rounds; dashed: thresholds)"
    )
    settings = (
        f"{escape(report.thresholds())}, "
        f"min excess {report.min_excess_s * 1000:g} ms, {report.rounds} round(s), "
        f"{escape(report.device)}/{escape(report.backend)}/{escape(report.dtype)}, matmul {report.matmul_size}, "
        f"all-reduce {report.allreduce_numel} elements, action {escape(report.action)}, "
        f"check took {report.wall_time_s:.2f} s"
        + ("" if report.network_localizable else "; slow links cannot be localized with fewer than 4 nodes")
    )
    body = (
        ""
        if report.skipped
        else _table(report)
        + f"<p>{legend}</p>"
        + _chart(
            report.nodes,
            {
                "compute": max(report.threshold, report.compute_threshold_applied),
                "network": max(report.network_threshold, report.network_threshold_applied),
            },
        )
    )
    return (
        "<style>.rc-straggler table{border-collapse:collapse;font-family:sans-serif;font-size:13px}"
        ".rc-straggler td,.rc-straggler th{border:1px solid #ccc;padding:3px 8px;text-align:left}</style>"
        f'<div class="rc-straggler"><h3>{escape(report.summary())}</h3><p>{settings}</p>{body}</div>'
    )
