"""Inline SVG charts as strings: lines, bars, stacked shares, a reliability diagram, a Gantt
chart and a layered DAG. No JavaScript; each mark's ``<title>`` is its tooltip.

Every text that reaches the markup goes through :func:`esc` (stage ids, spec names and arm
ids come from the trace store and are untrusted).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape

__all__ = [
    "PALETTE",
    "Line",
    "Mark",
    "bars",
    "dag",
    "esc",
    "gantt",
    "line_chart",
    "reliability",
    "stacked_shares",
]

#: Colours for series and arms, in order (colour-blind-safe, Okabe–Ito).
PALETTE = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442", "#000")
STATUS_COLOURS = {
    "completed": "#009e73",
    "failed": "#d55e00",
    "rejected": "#cc79a7",
    "skipped": "#999",
    "running": "#56b4e9",
}
W, H, PAD_L, PAD_R, PAD_T, PAD_B = 760, 240, 56, 16, 16, 36


def esc(value: object) -> str:
    """``value`` as text safe inside an element or a quoted attribute."""
    return escape(str(value), quote=True)


@dataclass
class Line:
    label: str
    points: list[tuple[int, float | None]]  # (x index, y); None breaks the line
    colour: str = PALETTE[0]
    tips: list[str] = field(default_factory=list)  # per point, in order


@dataclass
class Mark:
    """A vertical marker at x (an applied change, a new version)."""

    x: float
    label: str
    colour: str = "#d55e00"


def _open(width: int, height: int, label: str) -> str:
    return (
        f'<svg viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" aria-label="{esc(label)}">'
    )


def _fmt(value: float) -> str:
    return f"{value:.3g}"


def _axes(n: int, lo: float, hi: float, unit: str) -> tuple[str, float, float]:
    """The frame, y ticks and x ticks of a chart of ``n`` points; returns the markup and the
    x step and left edge."""
    inner_w, inner_h = W - PAD_L - PAD_R, H - PAD_T - PAD_B
    parts = [f'<rect x="{PAD_L}" y="{PAD_T}" width="{inner_w}" height="{inner_h}" class="frame"/>']
    for i in range(5):
        value = lo + (hi - lo) * i / 4
        y = PAD_T + inner_h - inner_h * i / 4
        parts.append(
            f'<line x1="{PAD_L}" x2="{W - PAD_R}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>'
        )
        parts.append(
            f'<text x="{PAD_L - 6}" y="{y + 4:.1f}" text-anchor="end">{esc(_fmt(value))}</text>'
        )
    step = inner_w / max(n, 1)
    every = max(1, n // 10)
    for i in range(0, n, every):
        x = PAD_L + step * (i + 0.5)
        parts.append(f'<text x="{x:.1f}" y="{H - PAD_B + 16}" text-anchor="middle">{i + 1}</text>')
    parts.append(
        f'<text x="{W - PAD_R}" y="{H - 4}" text-anchor="end" class="muted">run # ({esc(unit)})'
        "</text>"
    )
    return "".join(parts), step, PAD_L


def _y(value: float, lo: float, hi: float) -> float:
    inner_h = H - PAD_T - PAD_B
    span = hi - lo or 1.0
    return PAD_T + inner_h - inner_h * (value - lo) / span


def _marks(marks: Sequence[Mark], step: float) -> str:
    parts = []
    for m in marks:
        x = PAD_L + step * m.x
        parts.append(
            f'<g class="mark"><title>{esc(m.label)}</title><line x1="{x:.1f}" x2="{x:.1f}" '
            f'y1="{PAD_T}" y2="{H - PAD_B}" stroke="{esc(m.colour)}" stroke-dasharray="4 3"/>'
            f'<text x="{x + 3:.1f}" y="{PAD_T + 11}" fill="{esc(m.colour)}">'
            f"{esc(m.label[:24])}</text></g>"
        )
    return "".join(parts)


def line_chart(
    n: int,
    lines: Sequence[Line],
    *,
    lo: float,
    hi: float,
    unit: str,
    label: str,
    marks: Sequence[Mark] = (),
) -> str:
    """Lines over ``n`` runs (x is a run's index), with vertical ``marks``."""
    frame, step, left = _axes(n, lo, hi, unit)
    parts = [_open(W, H, label), frame, _marks(marks, step)]
    for line in lines:
        runs: list[list[str]] = [[]]
        dots = []
        for k, (i, value) in enumerate(line.points):
            if value is None:
                runs.append([])
                continue
            x, y = left + step * (i + 0.5), _y(value, lo, hi)
            runs[-1].append(f"{x:.1f},{y:.1f}")
            tip = line.tips[k] if k < len(line.tips) else f"{line.label}: {_fmt(value)}"
            dots.append(
                f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{esc(line.colour)}">'
                f"<title>{esc(tip)}</title></circle>"
            )
        for run in runs:
            if len(run) > 1:
                parts.append(
                    f'<polyline points="{" ".join(run)}" fill="none" '
                    f'stroke="{esc(line.colour)}" stroke-width="1.5"/>'
                )
        parts.extend(dots)
    parts.append("</svg>")
    return "".join(parts)


def bars(
    values: Sequence[float | None],
    tips: Sequence[str],
    *,
    unit: str,
    label: str,
    colour: str = PALETTE[0],
    marks: Sequence[Mark] = (),
) -> str:
    """One bar per run; a run without a value has none."""
    hi = max((v for v in values if v is not None), default=0.0) or 1.0
    frame, step, left = _axes(len(values), 0.0, hi, unit)
    parts = [_open(W, H, label), frame, _marks(marks, step)]
    base = _y(0.0, 0.0, hi)
    for i, (value, tip) in enumerate(zip(values, tips, strict=True)):
        if value is None:
            continue
        top = _y(value, 0.0, hi)
        parts.append(
            f'<rect x="{left + step * i + step * 0.15:.1f}" y="{top:.1f}" '
            f'width="{max(step * 0.7, 1):.1f}" height="{base - top:.1f}" fill="{esc(colour)}">'
            f"<title>{esc(tip)}</title></rect>"
        )
    parts.append("</svg>")
    return "".join(parts)


def stacked_shares(windows: Sequence[tuple[str, dict[str, int]]], *, label: str) -> str:
    """One column per window of runs: each arm's share of the choices in it."""
    arms = sorted({a for _, counts in windows for a in counts})
    colour = {a: PALETTE[i % len(PALETTE)] for i, a in enumerate(arms)}
    frame, step, left = _axes(len(windows), 0.0, 1.0, "window of runs")
    parts = [_open(W, H + 20 * ((len(arms) + 3) // 4), label), frame]
    for i, (tip, counts) in enumerate(windows):
        total = sum(counts.values()) or 1
        below = 0.0
        for arm in arms:
            share = counts.get(arm, 0) / total
            if share <= 0:
                continue
            top, bottom = _y(below + share, 0.0, 1.0), _y(below, 0.0, 1.0)
            parts.append(
                f'<rect x="{left + step * i + step * 0.1:.1f}" y="{top:.1f}" '
                f'width="{max(step * 0.8, 1):.1f}" height="{bottom - top:.1f}" '
                f'fill="{colour[arm]}"><title>{esc(f"{tip}: {arm} {share:.0%}")}</title></rect>'
            )
            below += share
    for k, arm in enumerate(arms):
        x, y = PAD_L + (k % 4) * 180, H + 14 + 20 * (k // 4)
        parts.append(
            f'<rect x="{x}" y="{y - 9}" width="10" height="10" fill="{colour[arm]}"/>'
            f'<text x="{x + 14}" y="{y}">{esc(arm[:26])}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def reliability(bins: Sequence[tuple[float, float, int]], *, label: str) -> str:
    """A reliability diagram: (mean confidence, good rate, outputs) per bin against the
    diagonal of perfect calibration; a dot's area grows with its outputs."""
    size, pad = 260, 36
    inner = size - 2 * pad

    def xy(cx: float, cy: float) -> tuple[float, float]:
        return pad + inner * cx, size - pad - inner * cy

    x0, y0 = xy(0, 0)
    x1, y1 = xy(1, 1)
    parts = [
        _open(size, size, label),
        f'<rect x="{pad}" y="{pad}" width="{inner}" height="{inner}" class="frame"/>',
        f'<line x1="{x0}" y1="{y0}" x2="{x1}" y2="{y1}" class="grid" stroke-dasharray="4 3"/>',
        f'<text x="{size / 2}" y="{size - 6}" text-anchor="middle">confidence</text>',
        f'<text x="10" y="{size / 2}" transform="rotate(-90 10 {size / 2})" '
        'text-anchor="middle">good rate</text>',
    ]
    most = max((b[2] for b in bins), default=1) or 1
    for conf, good, outputs in bins:
        cx, cy = xy(conf, good)
        r = 3 + 7 * (outputs / most) ** 0.5
        tip = f"confidence {conf:.2f}: good {good:.0%} of {outputs} output(s)"
        parts.append(
            f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="{r:.1f}" fill="{PALETTE[0]}" '
            f'fill-opacity="0.7"><title>{esc(tip)}</title></circle>'
        )
    parts.append("</svg>")
    return "".join(parts)


def gantt(
    rows: Sequence[tuple[str, float, float, str, list[tuple[float, float, str]]]], *, label: str
) -> str:
    """One row per stage: (label, start ms, end ms, status, [(start, end, tip) of its
    attempts]); a zero-length span is a diamond."""
    name_w, row_h = 180, 26
    width, height = W, PAD_T + row_h * len(rows) + 30
    end = max((r[2] for r in rows), default=0.0) or 1.0
    scale = (width - name_w - PAD_R) / end
    parts = [_open(width, height, label)]
    for k in range(5):
        x = name_w + scale * end * k / 4
        parts.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{PAD_T}" y2="{height - 24}" class="grid"/>'
            f'<text x="{x:.1f}" y="{height - 8}" '
            f'text-anchor="{"end" if k == 4 else "middle"}">'
            f"{esc(_fmt(end * k / 4 / 1000))} s</text>"
        )
    for i, (name, start, stop, status, attempts) in enumerate(rows):
        y = PAD_T + row_h * i
        colour = STATUS_COLOURS.get(status, "#777")
        parts.append(
            f'<text x="{name_w - 8}" y="{y + 17}" text-anchor="end">{esc(name[:28])}</text>'
        )
        tip = f"{name}: {status}, {start / 1000:.3f} s → {stop / 1000:.3f} s"
        if stop - start <= 0:
            cx = name_w + scale * start
            parts.append(
                f'<path d="M{cx:.1f},{y + 5} l7,8 l-7,8 l-7,-8 z" fill="{colour}">'
                f"<title>{esc(tip)}</title></path>"
            )
        else:
            parts.append(
                f'<rect x="{name_w + scale * start:.1f}" y="{y + 4}" rx="3" '
                f'width="{max(scale * (stop - start), 2):.1f}" height="{row_h - 8}" '
                f'fill="{colour}" fill-opacity="0.35" stroke="{colour}">'
                f"<title>{esc(tip)}</title></rect>"
            )
        for a_start, a_stop, a_tip in attempts:
            parts.append(
                f'<rect x="{name_w + scale * a_start:.1f}" y="{y + 9}" '
                f'width="{max(scale * (a_stop - a_start), 2):.1f}" height="{row_h - 18}" '
                f'fill="{colour}"><title>{esc(a_tip)}</title></rect>'
            )
    parts.append("</svg>")
    return "".join(parts)


def dag(nodes: Sequence[tuple[str, int, list[str], str, str]], *, label: str) -> str:
    """Stages as boxes in columns by topological level, with an arrow per dependency:
    (stage id, level, depends_on, kind, status)."""
    box_w, box_h, gap_x, gap_y = 150, 40, 60, 18
    columns: dict[int, list[str]] = {}
    for sid, level, _, _, _ in nodes:
        columns.setdefault(level, []).append(sid)
    tallest = max((len(c) for c in columns.values()), default=1)
    width = 20 + (box_w + gap_x) * len(columns)
    height = 20 + (box_h + gap_y) * tallest
    where: dict[str, tuple[float, float]] = {}
    for level, ids in columns.items():
        top = (height - (box_h + gap_y) * len(ids)) / 2 + gap_y / 2
        for k, sid in enumerate(ids):
            where[sid] = (10 + (box_w + gap_x) * level, top + (box_h + gap_y) * k)
    parts = [
        _open(width, height, label),
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker></defs>',
    ]
    for sid, _, depends_on, _, _ in nodes:
        x2, y2 = where[sid]
        for dep in depends_on:
            if dep not in where:
                continue
            x1, y1 = where[dep]
            parts.append(
                f'<path d="M{x1 + box_w:.1f},{y1 + box_h / 2:.1f} C{x1 + box_w + gap_x / 2:.1f},'
                f"{y1 + box_h / 2:.1f} {x2 - gap_x / 2:.1f},{y2 + box_h / 2:.1f} {x2:.1f},"
                f'{y2 + box_h / 2:.1f}" fill="none" stroke="#555" marker-end="url(#arrow)"/>'
            )
    for sid, level, depends_on, kind, status in nodes:
        x, y = where[sid]
        colour = STATUS_COLOURS.get(status, "#777")
        tip = f"{sid} ({kind}, level {level}): {status}; depends on {', '.join(depends_on) or '-'}"
        parts.append(
            f'<g><title>{esc(tip)}</title><rect x="{x:.1f}" y="{y:.1f}" width="{box_w}" '
            f'height="{box_h}" rx="6" fill="#fff" stroke="{colour}" stroke-width="2"/>'
            f'<text x="{x + box_w / 2:.1f}" y="{y + 17:.1f}" text-anchor="middle">'
            f"{esc(sid[:20])}</text>"
            f'<text x="{x + box_w / 2:.1f}" y="{y + 32:.1f}" text-anchor="middle" '
            f'class="muted">{esc(kind)} · {esc(status)}</text></g>'
        )
    parts.append("</svg>")
    return "".join(parts)
