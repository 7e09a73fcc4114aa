"""How the improvement loop's results look in a terminal (rich): the diagnosis, the proposals,
one proposal's evidence and diff."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from armature_temporal.improve.models import Diagnosis, ImproveResult, Proposal, SpecChange

if TYPE_CHECKING:
    from rich.console import RenderableType

__all__ = [
    "change_label",
    "render_diagnosis",
    "render_proposal",
    "render_proposals",
    "render_result",
]


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _value(v: object) -> str:
    if v is None:
        return "(unset)"
    text = str(v).strip().replace("\n", "⏎")
    return text if len(text) <= 40 else text[:39] + "…"


def change_label(change: SpecChange) -> str:
    """``analyze.model_tier: small → medium``."""
    if change.field == "description":
        return f"{change.surface}: + instruction"
    return f"{change.surface}: {_value(change.old)} → {_value(change.new)}"


def render_diagnosis(diag: Diagnosis) -> RenderableType:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    hqs = f"{diag.mean_hqs:.3f}" if diag.mean_hqs is not None else "—"
    head = Text(
        f"diagnosis: {diag.runs} finished runs of {diag.spec_name} "
        f"(spec_hash {diag.spec_hash[:12]}), mean HQS {hqs}"
    )
    table = Table(box=None, pad_edge=False)
    cols = ("stage", "runs", "invalid", "unsure", "escalated", "failed", "first try", "judge")
    for col in (*cols, "tiers"):
        table.add_column(col)
    for s in diag.stages:
        table.add_row(
            s.stage,
            str(s.runs),
            _pct(s.invalid_rate),
            _pct(s.low_confidence_rate),  # valid outputs refused for low confidence
            _pct(s.escalation_rate),
            _pct(s.failure_rate),
            _pct(s.first_try_rate),
            f"{s.judge_score:.2f}" if s.judge_score is not None else "—",
            ", ".join(f"{t}×{n}" for t, n in s.tiers.items()) or "—",
        )
    return Group(head, table)


def render_proposals(proposals: Sequence[Proposal]) -> RenderableType:
    """One row each: id, verdict (and status once applied or dismissed), the measured HQS
    change with its interval, and the change itself (last, so it is what wraps)."""
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    for col in ("id", "verdict", "ΔHQS", "95% interval", "change"):
        # Ids and figures are copied or compared: never wrapped; the change text may wrap.
        table.add_column(col, no_wrap=col != "change", overflow="fold")
    for p in proposals:
        colour = {"verified": "green", "not_better": "yellow", "failed": "red"}[p.verdict]
        status = "" if p.status == "proposed" else f" ({p.status})"
        table.add_row(
            p.id,
            f"[{colour}]{p.verdict}[/{colour}]{status}",
            f"{p.delta:+.3f}",
            f"[{p.ci_low:+.3f}, {p.ci_high:+.3f}]",
            "; ".join(change_label(c) for c in p.changes),
        )
    return table


def render_result(result: ImproveResult) -> RenderableType:
    from rich.console import Group
    from rich.text import Text

    parts: list[RenderableType] = [Text(f"{result.status}: {result.detail}")]
    if result.diagnosis is not None and result.diagnosis.runs:
        parts.append(render_diagnosis(result.diagnosis))
    if result.proposals:
        parts.append(Text("proposals"))
        parts.append(render_proposals(result.proposals))
        for p in result.proposals:
            for c in p.changes:
                parts.append(Text(f"  {p.id}: {c.why}"))
        if any(p.verdict == "verified" for p in result.proposals):
            parts.append(
                Text(
                    "review: armature proposals show <id>; apply: armature proposals apply <id> "
                    "<spec file>"
                )
            )
    return Group(*parts)


def render_proposal(p: Proposal) -> RenderableType:
    from rich.console import Group
    from rich.syntax import Syntax
    from rich.text import Text

    lines = [
        f"proposal {p.id} · spec {p.spec_name} · {p.status} · {p.verdict}",
        f"made by {p.improve_run_id} at {p.created_at[:19]} from spec_hash {p.base_spec_hash[:12]}",
        f"verdict: {p.detail}",
    ]
    if p.test is not None:
        t = p.test
        test = (
            f"test: non-inferiority, margin {t.margin:g} HQS"
            if t.kind == "non_inferiority"
            else "test: superiority (gain above 0)"
        )
        lines.append(
            f"{test}; Holm rank {t.holm_rank} of {t.m}, alpha {t.alpha_adj:g}, adjusted "
            f"interval [{t.adj_ci_low:+.3f}, {t.adj_ci_high:+.3f}]"
        )
        if t.baseline_cost is not None and t.candidate_cost is not None:
            lines.append(
                f"cost per run (current → changed): {t.baseline_cost:g} → {t.candidate_cost:g} "
                f"{t.cost_unit}"
            )
    for c in p.changes:
        lines.append(f"change: {change_label(c)}")
        lines.append(f"  why: {c.why}")
    pairs = ", ".join(
        f"{b:.2f}→{c:.2f}" for b, c in zip(p.baseline_hqs, p.candidate_hqs, strict=True)
    )
    lines.append(f"paired HQS (current → changed): {pairs or '—'}")
    return Group(Text("\n".join(lines)), Syntax(p.diff or "(no diff)", "diff", theme="ansi_dark"))
