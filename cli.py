"""The ``armature`` command: parses arguments, calls the core, prints.

Data goes to stdout, diagnostics to stderr. Exit codes: 0 success, 1 failure, 2 usage error or
invalid spec. Every command that shows something takes ``--json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.text import Text
from rich.tree import Tree

from armature_temporal.compiler import Plan, PlanStage, compile_spec
from armature_temporal.errors import SpecError
from armature_temporal.loader import load_spec
from armature_temporal.starter import starter_spec

app = typer.Typer(
    name="armature",
    help="Durable LLM agent workflows on Temporal. Write a spec in YAML, validate it, run it.\n\n"
    "Start with: armature new my-flow.yaml && armature validate my-flow.yaml",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)

out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]


def _print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False, default=str) + "\n")


@app.command()
def validate(
    specs: Annotated[
        list[Path], typer.Argument(help="Spec files to check.", show_default=False, metavar="SPEC")
    ],
    as_json: JsonFlag = False,
) -> None:
    """Check spec files and report every problem with file:line:column and a fix.

    Exits 0 when all are valid, 2 when any is not.
    """
    results = []
    for path in specs:
        try:
            plan = compile_spec(load_spec(path))
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
                "name": plan.name,
                "stages": len(plan.stages),
                "spec_hash": plan.spec_hash,
            }
        )
        if not as_json:
            out.print(
                f"{path}: ok — {plan.name!r}, {len(plan.stages)} stages, "
                f"spec_hash {plan.spec_hash[:12]}",
                markup=False,
                highlight=False,
            )
    if as_json:
        _print_json(results)
    bad = sum(not r["valid"] for r in results)
    if bad:
        if not as_json:
            err.print(f"{bad} of {len(results)} spec(s) invalid", markup=False)
        raise typer.Exit(2)


def _load_or_exit(path: Path) -> Plan:
    try:
        return compile_spec(load_spec(path))
    except SpecError as exc:
        for issue in exc.issues:
            err.print(str(issue), markup=False, highlight=False)
        raise typer.Exit(2) from None


def _stage_label(stage: PlanStage) -> str:
    parts = [f"[bold]{stage.id}[/bold]"]
    if stage.role is not None:
        parts.append(f"{stage.role.type} · tier {stage.role.model_tier}")
        if stage.role.tools:
            parts.append(f"tools {', '.join(stage.role.tools)}")
    elif stage.tool is not None:
        parts.append(f"tool {stage.tool.name}")
    elif stage.kind == "fan_out":
        parts.append(f"fan_out {stage.fan_out} → fan_in {stage.fan_in}")
    if stage.output_mode != "text":
        parts.append(stage.output_mode)
    if stage.max_attempts > 1:
        parts.append(f"retry ×{stage.max_attempts}")
    if stage.escalate and stage.escalation_ladder:
        parts.append(f"escalate → {' → '.join(stage.escalation_ladder)}")
    if stage.loop is not None:
        parts.append(f"loop ≤{stage.loop.max_iterations}")
    if stage.gate is not None:
        parts.append("[yellow]human gate[/yellow]")
    if stage.arms:
        parts.append(f"arms {', '.join(a.arm_id for a in stage.arms)}")
    if stage.condition or stage.skip_if:
        parts.append("conditional")
    return " · ".join(parts)


def _fold(markup: str) -> Text:
    return Text.from_markup(markup, overflow="fold")


def _plan_tree(plan: Plan, title: str) -> Tree:
    tree = Tree(_fold(title))
    by_id = {s.id: s for s in plan.stages}
    dependents: dict[str, list[str]] = {s.id: [] for s in plan.stages}
    for s in plan.stages:
        for d in s.depends_on:
            dependents[d].append(s.id)
    shown: set[str] = set()

    def add(node: Tree, sid: str, parent: str | None) -> None:
        stage = by_id[sid]
        others = [d for d in stage.depends_on if d != parent]
        label = _stage_label(stage)
        if sid in shown:
            node.add(_fold(f"{sid} [dim](shown above)[/dim]"))
            return
        if others:
            label += f" [dim](also after {', '.join(others)})[/dim]"
        shown.add(sid)
        branch = node.add(_fold(label))
        if sid in plan.children:
            child = plan.children[sid]
            branch.add(_plan_tree(child, f"[cyan]subagent {child.name}[/cyan]"))
        for nxt in dependents[sid]:
            # Show a stage under the last of its dependencies, once all are shown.
            if by_id[nxt].depends_on[-1] == sid or all(d in shown for d in by_id[nxt].depends_on):
                add(branch, nxt, sid)

    for s in plan.stages:
        if not s.depends_on and not s.post_run:
            add(tree, s.id, None)
    post = [s for s in plan.stages if s.post_run]
    if post:
        after = tree.add(_fold("[dim]after the DAG completes (post_run)[/dim]"))
        for s in post:
            after.add(_fold(_stage_label(s)))
    return tree


@app.command()
def plan(
    spec: Annotated[
        Path, typer.Argument(help="The spec file.", show_default=False, metavar="SPEC")
    ],
    as_json: JsonFlag = False,
) -> None:
    """Show the compiled plan: the stage DAG with tiers, retries, gates and fan-out."""
    compiled = _load_or_exit(spec)
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


@app.command()
def schema() -> None:
    """Print the JSON Schema of the spec language (for editor completion)."""
    from armature_temporal.spec import Spec

    _print_json(Spec.model_json_schema())


@app.command()
def new(
    path: Annotated[
        Path, typer.Argument(help="Where to write the starter spec.", metavar="[PATH]")
    ] = Path("armature.yaml"),
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    """Write a commented starter spec that validates and runs offline."""
    if path.exists() and not force:
        err.print(f"{path} already exists; choose another path or pass --force", markup=False)
        raise typer.Exit(2)
    path.write_text(starter_spec(str(path)), encoding="utf-8")
    out.print(f"wrote {path}; next: armature validate {path} && armature plan {path}", markup=False)


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
