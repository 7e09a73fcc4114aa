"""How the improvement loop's results look in a terminal (rich): the diagnosis, the proposals,
one proposal's evidence and diff."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

from armature_temporal.improve.models import (
    AppliedChange,
    Diagnosis,
    ImproveResult,
    ImproveRound,
    Proposal,
    SpecChange,
)

if TYPE_CHECKING:
    from rich.console import RenderableType

__all__ = [
    "change_label",
    "effort_lines",
    "history_data",
    "render_diagnosis",
    "render_history",
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
    if change.field == "sources" and isinstance(change.new, list):  # enrichment: what it adds
        added = [s for s in change.new if s not in (change.old or [])]
        return f"{change.surface}: + {', '.join(added)}"
    return f"{change.surface}: {_value(change.old)} → {_value(change.new)}"


def effort_lines(effort: dict[str, Any] | None) -> list[str]:
    """A round's effort report (``RoundEffort`` as JSON) in words; a warning line first when
    the refiner's tier is a judge's."""
    if effort is None:
        return ["effort: not reported (a round from before effort reports)"]
    lines: list[str] = []
    if effort["same_tier"]:
        lines.append(f"WARNING same tier: {effort['judge_note']}")
    refiner = (
        f" (refiner on {effort['refiner_tier']!r}: {effort['refiner_tokens']:,} tokens)"
        if effort["refiner_tier"] is not None
        else ""
    )
    left = f", {effort['proposals_left_out']} left out" if effort["proposals_left_out"] else ""
    held = (
        f"HQS {effort['held_out_hqs']:.3f}"
        if effort["held_out_hqs"] is not None
        else effort["held_out"]
    )
    lines.append(
        f"effort: {effort['proposals_tried']} proposal(s) tried{left}; "
        f"{effort['runs']} verification runs, {effort['tokens']:,} tokens{refiner}; "
        f"stopped: {effort['stop']} ({effort['stop_detail']})"
    )
    lines.append(f"held-out: {held}")
    return lines


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


#: Narrower than this, ``render_proposals`` puts each change on a line of its own: in one
#: table the change column, last, was squeezed to a few characters at 80 columns.
WIDE_PROPOSALS = 110


def render_proposals(
    proposals: Sequence[Proposal], unverified: Collection[str] = ()
) -> RenderableType:
    """One row each: id, verdict (and status once applied or dismissed), lane, the measured
    HQS change with its interval, and the change itself — last in a wide terminal, on a line
    of its own under the row in a narrow one. The ids in ``unverified`` (their record in the
    store does not verify) say so after the verdict."""
    return _Proposals(list(proposals), set(unverified))


class _Proposals:
    """Laid out at render time, for the width the console has."""

    def __init__(self, proposals: list[Proposal], unverified: set[str]) -> None:
        self.proposals = proposals
        self.unverified = unverified

    def _verdict(self, p: Proposal) -> str:
        colour = {"verified": "green", "not_better": "yellow", "failed": "red"}[p.verdict]
        status = "" if p.status == "proposed" else f" ({p.status})"
        if p.id in self.unverified:
            status += " [red](record unverified)[/red]"
        return f"[{colour}]{p.verdict}[/{colour}]{status}"

    def __rich_console__(self, console: Any, options: Any) -> Any:
        from rich.table import Table
        from rich.text import Text

        if options.max_width < WIDE_PROPOSALS:
            for p in self.proposals:  # a line of figures, then the change, indented, wrapping
                yield Text.assemble(
                    f"{p.id}  ",
                    Text.from_markup(self._verdict(p)),
                    f"  {p.lane}  ΔHQS {p.delta:+.3f} [{p.ci_low:+.3f}, {p.ci_high:+.3f}]",
                )
                change = "; ".join(change_label(c) for c in p.changes)
                yield Text("    " + change, overflow="fold")
            return
        table = Table(box=None, pad_edge=False)
        for col in ("id", "verdict", "lane", "ΔHQS", "95% interval", "change"):
            # Ids and figures are copied or compared: never wrapped; the change text may wrap.
            table.add_column(col, no_wrap=col != "change", overflow="fold")
        for p in self.proposals:
            table.add_row(
                p.id,
                self._verdict(p),
                p.lane,
                f"{p.delta:+.3f}",
                f"[{p.ci_low:+.3f}, {p.ci_high:+.3f}]",
                "; ".join(change_label(c) for c in p.changes),
            )
        yield table


def render_result(result: ImproveResult) -> RenderableType:
    from rich.console import Group
    from rich.text import Text

    parts: list[RenderableType] = [Text(f"{result.status}: {result.detail}")]
    effort = result.effort.model_dump(mode="json") if result.effort is not None else None
    parts += [Text(line) for line in effort_lines(effort)]
    if result.verification is not None:
        parts.append(Text(_verification_line(result.verification.model_dump(mode="json"))))
    if result.diagnosis is not None and result.diagnosis.runs:
        parts.append(render_diagnosis(result.diagnosis))
    if result.proposals:
        parts.append(Text("proposals"))
        parts.append(render_proposals(result.proposals))
        for p in result.proposals:
            for c in p.changes:
                by = " (LLM refiner)" if c.origin == "refiner" else ""
                parts.append(Text(f"  {p.id}{by}: {c.why}"))
        settled = result.settled
        if settled is not None and settled.applied:
            parts.append(Text(f"auto-applied {settled.applied} to the spec (auto lane)"))
        if settled is not None and settled.pending_path:
            parts.append(
                Text(
                    f"{settled.pending} needs review (review lane): written to "
                    f"{settled.pending_path}; apply with `armature improve SPEC --apply-pending`"
                )
            )
        for note in settled.notes if settled is not None else []:
            parts.append(Text(f"note: {note}"))
    for note in result.notes:
        parts.append(Text(f"note: {note}"))
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
        f"lane: {p.lane}" + "".join(f"\n  {r}" for r in p.lane_reasons),
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


def history_data(
    spec: str,
    rounds: Sequence[ImproveRound],
    proposals: Sequence[Proposal],
    applied: Sequence[AppliedChange],
) -> dict[str, Any]:
    """``armature improve history --json``: rounds oldest first, each with its proposals (no
    spec texts), and the applied changes."""
    by_round: dict[str, list[dict[str, Any]]] = {}
    for p in sorted(proposals, key=lambda p: (p.created_at, p.id)):
        row = p.model_dump(mode="json", exclude={"spec_text", "base_spec_text", "diff"})
        by_round.setdefault(p.improve_run_id, []).append(row)
    return {
        "spec_name": spec,
        "rounds": [
            {**r.model_dump(mode="json"), "proposals": by_round.get(r.id, [])} for r in rounds
        ],
        "applied": [a.model_dump(mode="json") for a in applied],
    }


def _codes(codes: Sequence[str]) -> str:
    return ", ".join(codes) or "—"


def _verification_line(v: dict[str, Any]) -> str:
    head = f"drift {v['drift']:.2f} ({len(v['regressed'])} of {len(v['current_failures'])} "
    head += "current failures were verified fixed before)"
    if v.get("proposal_id") is None:
        return head
    return (
        f"{head}; applied {v['proposal_id']}: verified fixes {_codes(v['verified_fixes'])}; "
        f"missed {_codes(v['missed_predictions'])}; unexpected regressions "
        f"{_codes(v['unexpected_regressions'])}"
    )


def render_history(data: dict[str, Any]) -> RenderableType:
    """Rounds and applied changes in time order."""
    from rich.console import Group
    from rich.text import Text

    events: list[tuple[str, list[str]]] = []
    for r in data["rounds"]:
        hqs = f"{r['mean_hqs']:.3f}" if r["mean_hqs"] is not None else "—"
        lines = [
            f"{r['created_at'][:19]}  round {r['id']}  {r['status']}  HQS {hqs} over "
            f"{r['runs']} runs of {r['spec_hash'][:12]}"
        ]
        if r["verification"] is not None:
            lines.append(f"  {_verification_line(r['verification'])}")
        lines += [f"  {line}" for line in effort_lines(r.get("effort"))]
        for p in r["proposals"]:
            change = "; ".join(change_label(SpecChange(**c)) for c in p["changes"])
            lines.append(
                f"  {p['id']}  {p['verdict']} ({p['status']})  ΔHQS {p['delta']:+.3f}  {change}"
            )
            lines.append(
                f"    predicts fixed: {_codes(p['predicted_fixes'])}; may regress: "
                f"{_codes(p['predicted_regressions'])}"
            )
        events.append((r["created_at"], lines))
    for a in data["applied"]:
        events.append(
            (
                a["applied_at"],
                [
                    f"{a['applied_at'][:19]}  applied {a['proposal_id']} to {a['path']} "
                    f"(spec_hash {a['base_spec_hash'][:12]} → {a['spec_hash'][:12]})"
                ],
            )
        )
    events.sort(key=lambda e: e[0])
    title = Text(f"improvement history of {data['spec_name']}", style="bold")
    return Group(title, *(Text("\n".join(lines)) for _, lines in events))
