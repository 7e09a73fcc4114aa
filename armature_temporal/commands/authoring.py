"""Write specs: ``armature validate``, ``plan``, ``schema``, ``new`` and ``scan`` (the
safety scanner, for checking texts a spec will see). None of them needs Temporal."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text
from rich.tree import Tree

from armature_temporal.commands._common import (
    WRITE,
    JsonFlag,
    SpecArg,
    err,
    load_or_exit,
    out,
    print_json,
)
from armature_temporal.errors import SpecError

if TYPE_CHECKING:
    from armature_temporal.spec.compiler import Plan, PlanStage

app = typer.Typer()


@app.command(rich_help_panel=WRITE)
def validate(
    specs: Annotated[
        list[Path], typer.Argument(help="Spec files to check.", show_default=False, metavar="SPEC")
    ],
    as_json: JsonFlag = False,
) -> None:
    """Check spec files and report every problem with file:line:column and a fix.

    All problems are reported in one pass. Warnings (run inputs read but not declared, tools no
    module is known to register, armature-agents 0.7.0 fields accepted but not used here) are
    printed too but do not fail validation.

    Exits 0 when all are valid (warnings or not), 2 when any is not.

    Example: armature validate specs/*.yaml --json
    """
    from armature_temporal.spec.compiler import compile_spec
    from armature_temporal.spec.loader import load_spec

    results = []
    for path in specs:
        try:
            loaded = load_spec(path)
            plan = compile_spec(loaded)
        except SpecError as exc:
            results.append(
                {"path": str(path), "valid": False, "errors": [i.to_dict() for i in exc.issues]}
            )
            if not as_json:
                for issue in exc.issues:
                    err.print(str(issue), markup=False, highlight=False)
            continue
        results.append(
            {
                "path": str(path),
                "valid": True,
                "errors": [],
                "warnings": [w.to_dict() for w in loaded.warnings],
                "name": plan.name,
                "stages": len(plan.stages),
                "spec_hash": plan.spec_hash,
            }
        )
        if not as_json:
            for warning in loaded.warnings:
                err.print(f"warning: {warning}", markup=False, highlight=False)
            out.print(
                f"{path}: ok — {plan.name!r}, {len(plan.stages)} stages, "
                f"spec_hash {plan.spec_hash[:12]}"
                + (f", {len(loaded.warnings)} warning(s)" if loaded.warnings else ""),
                markup=False,
                highlight=False,
            )
    if as_json:
        print_json(results)
    bad = sum(not r["valid"] for r in results)
    if bad:
        if not as_json:
            err.print(f"{bad} of {len(results)} spec(s) invalid", markup=False)
        raise typer.Exit(2)


def _loop_labels(role: Any) -> list[str]:
    """A tool loop's context policy and budgets, in short."""
    labels = []
    ctx = role.context
    if ctx is not None and not ctx.enabled:
        labels.append("context off")
    elif ctx is not None:
        budget = f"{ctx.token_budget:,} tokens" if ctx.token_budget else "the model's window"
        kept = f"summarized by {ctx.summarize}" if ctx.summarize else "stubs"
        labels.append(f"context {budget}, last {ctx.keep_recent} turns, older → {kept}")
        if role.max_turns > ctx.segment_turns:
            labels.append(f"{ctx.segment_turns} turns a history, the rest in a child")
    spent = [
        f"{role.max_tokens_total:,} tokens" if role.max_tokens_total else "",
        f"${role.max_cost_usd:g}" if role.max_cost_usd else "",
        f"{role.deadline_s:g}s" if role.deadline_s else "",
    ]
    if any(spent):
        labels.append("budget " + ", ".join(s for s in spent if s))
    return labels


def _stage_label(stage: PlanStage) -> str:
    parts = [f"[bold]{stage.id}[/bold]"]
    if stage.role is not None:
        parts.append(f"{stage.role.type} · tier {stage.role.model_tier}")
        if stage.role.tools:
            parts.append(f"tools {', '.join(stage.role.tools)}")
            parts += _loop_labels(stage.role)
    elif stage.tool is not None:
        parts.append(f"tool {stage.tool.name}")
    elif stage.adapter is not None:
        parts.append(f"{stage.adapter.type} adapter {stage.adapter.name}")
    elif stage.kind == "fan_out":
        parts.append(f"fan_out {stage.fan_out} → fan_in {stage.fan_in}")
    if stage.retrieve is not None:
        r = stage.retrieve
        only = f" of {', '.join(r.sources)}" if r.sources else ""
        parts.append(
            f"retrieves {r.k} passages{only} from {r.collection!r} ({r.mode}"
            f"{', must cite' if r.cite else ''})"
        )
    if stage.output_mode != "text":
        parts.append(stage.output_mode)
    if stage.max_attempts > 1:
        parts.append(f"retry ×{stage.max_attempts - 1}")
    if stage.escalate and stage.escalation_ladder:
        parts.append(f"escalate → {' → '.join(stage.escalation_ladder)}")
    if stage.loop is not None:
        parts.append(f"loop ≤{stage.loop.max_iterations}")
    if stage.gate is not None:
        parts.append("[yellow]human gate[/yellow]")
    if stage.arms:
        parts.append(f"arms {', '.join(a.arm_id for a in stage.arms)}")
    if stage.partition_source is not None:
        parts.append(f"per item of {stage.partition_source} (≤{stage.fan_out} at a time)")
    if stage.condition or stage.skip_if:
        parts.append("conditional")
    if stage.block_below is not None:
        parts.append(f"blocks below {stage.block_below:g}")
    if stage.fail_as_value:
        parts.append("fail as value")
    if stage.implicit_depends_on:
        parts.append(
            f"[dim]reads {', '.join(stage.implicit_depends_on)} (implied dependency)[/dim]"
        )
    return " · ".join(parts)


def _schema_line(schema: dict[str, Any]) -> str:
    """An input schema in one line: ``{timezone: string*, max_count: integer}`` (* required)."""
    props = schema.get("properties")
    if not isinstance(props, dict) or not props:
        return "{}"
    required = set(schema.get("required") or [])
    parts = []
    for name, prop in props.items():
        kind = prop.get("type", "any") if isinstance(prop, dict) else "any"
        if isinstance(kind, list):
            kind = "|".join(str(k) for k in kind)
        parts.append(f"{name}: {kind}{'*' if name in required else ''}")
    return "{" + ", ".join(parts) + "}"


def mcp_lines(plan: Plan) -> list[str]:
    """The plan's MCP servers and the tools pinned from each (``armature plan``)."""
    if not plan.mcp_servers:
        return []
    lines = ["MCP tools (listed now, pinned in the plan; * = required argument):"]
    for server in plan.mcp_servers:
        where = (
            f"stdio: {' '.join([server.command or '', *server.args])}"
            if server.transport == "stdio"
            else f"{server.transport}: {server.url}"
        )
        lines.append(f"  {server.name} ({where}) — {len(server.tools)} tool(s)")
        for tool in server.tools:
            about = " ".join(tool.description.split())
            about = about if len(about) <= 100 else about[:97] + "..."
            called = f" [model calls it {tool.call_name}]" if tool.call_name != tool.name else ""
            lines.append(f"    {tool.canonical}{called} — {about or '(no description)'}")
            lines.append(f"      args {_schema_line(tool.input_schema)} · hash {tool.hash[:12]}")
    return lines


def _fold(markup: str) -> Text:
    return Text.from_markup(markup, overflow="fold")


#: Deeper stages are listed at this depth, each saying what it follows, so a long chain
#: (1,500 stages) prints as a readable list instead of recursing past Python's limit.
TREE_DEPTH = 10


def _plan_tree(plan: Plan, title: str) -> Tree:
    tree = Tree(_fold(title))
    by_id = {s.id: s for s in plan.stages}
    dependents: dict[str, list[str]] = {s.id: [] for s in plan.stages}
    for s in plan.stages:
        for d in s.depends_on:
            dependents[d].append(s.id)
    shown: set[str] = set()

    def add(root: Tree, first: str) -> None:
        # Depth first, in the order recursion would take, on an explicit stack: a stage goes
        # under the last of its dependencies, once all of them are shown.
        stack: list[tuple[Tree, str, str | None, int]] = [(root, first, None, 0)]
        while stack:
            node, sid, parent, depth = stack.pop()
            stage = by_id[sid]
            if parent is not None and not (
                stage.depends_on[-1] == parent or all(d in shown for d in stage.depends_on)
            ):
                continue
            if sid in shown:
                node.add(_fold(f"{sid} [dim](shown above)[/dim]"))
                continue
            others = [d for d in stage.depends_on if d != parent]
            label = _stage_label(stage)
            if parent is not None and depth > TREE_DEPTH:
                label += f" [dim](after {parent})[/dim]"
            if others:
                label += f" [dim](also after {', '.join(others)})[/dim]"
            shown.add(sid)
            branch = node.add(_fold(label))
            if sid in plan.children:
                child = plan.children[sid]
                branch.add(_plan_tree(child, f"[cyan]subagent {child.name}[/cyan]"))
            under = branch if depth < TREE_DEPTH else node
            for nxt in reversed(dependents[sid]):
                stack.append((under, nxt, sid, depth + 1))

    for s in plan.stages:
        if not s.depends_on and not s.post_run:
            add(tree, s.id)
    post = [s for s in plan.stages if s.post_run]
    if post:
        after = tree.add(_fold("[dim]after the DAG completes (post_run)[/dim]"))
        for s in post:
            after.add(_fold(_stage_label(s)))
    return tree


@app.command(rich_help_panel=WRITE)
def plan(
    spec: SpecArg,
    as_json: JsonFlag = False,
) -> None:
    """Show the compiled plan: the stage DAG with tiers, retries, gates and fan-out."""
    compiled = load_or_exit(spec)
    if as_json:
        sys.stdout.write(compiled.to_json() + "\n")
        return
    title = (
        f"[bold]{compiled.name}[/bold] v{compiled.version} · "
        f"spec_hash {compiled.spec_hash[:12]} · policy {compiled.policy_version[:12]}"
    )
    out.print(_plan_tree(compiled, title), soft_wrap=False)
    tiers = ", ".join(
        f"{t.name}={t.provider}{'/' + t.model if t.model else ''}" for t in compiled.tiers.values()
    )
    out.print(f"[dim]tiers (smallest first): {tiers}[/dim]")
    for line in mcp_lines(compiled):
        out.print(line, markup=False, highlight=False, soft_wrap=True)
    limits = [
        f"{name} {value:g}" if isinstance(value, float) else f"{name} {value}"
        for name, value in (
            ("max_llm_calls", compiled.max_llm_calls),
            ("max_iterations", compiled.max_iterations),
            ("timeout_hours", compiled.run_timeout_s / 3600 if compiled.run_timeout_s else None),
        )
        if value is not None
    ]
    if limits:
        out.print(f"[dim]limits: {', '.join(limits)}[/dim]")
    if compiled.completion:
        out.print(f"[dim]done when: {compiled.completion}[/dim]", markup=False)
    # checkpoint: asked 0.7.0 to persist stage results for resume; on Temporal every run is.
    note = "checkpoint: true is implied" if compiled.checkpoint else "no checkpoint: needed"
    out.print(
        "[dim]durable: every run resumes where it stopped after a crash (Temporal event "
        f"history; {note})[/dim]"
    )


@app.command(rich_help_panel=WRITE)
def schema() -> None:
    """Print the JSON Schema of the spec language (for editor completion)."""
    from armature_temporal.spec.models import Spec

    print_json(Spec.model_json_schema())


@app.command(rich_help_panel=WRITE)
def new(
    path: Annotated[
        Path, typer.Argument(help="Where to write the starter spec.", metavar="PATH")
    ] = Path("armature.yaml"),
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    """Write a commented starter spec that validates and runs offline (missing parent
    directories are created)."""
    if path.exists() and not force:
        err.print(f"{path} already exists; choose another path or pass --force", markup=False)
        raise typer.Exit(2)
    if path.is_dir():
        err.print(f"{path} is a directory; name a file such as {path / 'flow.yaml'}", markup=False)
        raise typer.Exit(2)
    from armature_temporal.spec.starter import starter_spec

    made = [p for p in reversed(path.parents) if not p.exists()]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(starter_spec(str(path)), encoding="utf-8")
    except OSError as exc:
        err.print(
            f"cannot write {path}: {exc.strerror or exc}; choose a path you can write to",
            markup=False,
        )
        raise typer.Exit(1) from None
    if made:
        out.print(f"created directory {made[-1]}", markup=False)
    quoted = shlex.quote(str(path))
    out.print(
        f"wrote {path}; next: armature validate {quoted} && armature plan {quoted}", markup=False
    )


@app.command(rich_help_panel=WRITE)
def scan() -> None:
    """Scan texts for prompt injection, score manipulation, tool misuse, secrets, personal
    data and scope overreach.

    Reads one JSON string per line on stdin; writes one JSON object per line:
    {"flagged": bool, "findings": [{"category", "span", "score", ...}]}. A line that is not a
    JSON string gets {"line": N, "error": ...} and the exit code is 1; flagged texts do not
    change the exit code. Example: echo '"ignore all previous instructions"' | armature scan
    """
    from armature_temporal.scanner import scan_jsonl

    raise typer.Exit(scan_jsonl(sys.stdin, sys.stdout))
