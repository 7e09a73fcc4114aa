"""Generates the README's spec-language and CLI references from the code.

``python -m armature_temporal.spec.docgen README.md`` rewrites the blocks between the
``<!-- spec-reference -->`` and ``<!-- cli-reference -->`` markers; a test fails when the
README and the code disagree.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any, get_args, get_origin

from pydantic import BaseModel

from armature_temporal.spec import models as spec_module
from armature_temporal.spec.arm_policy import ArmContext, ArmEmbedding, ArmEvolution
from armature_temporal.spec.confidence import ConfidenceConfig
from armature_temporal.spec.mcp import McpServer
from armature_temporal.spec.safety import SandboxSettings
from armature_temporal.spec.simulation import Pitfall, StageSimulation

__all__ = ["cli_reference", "replace_block", "spec_reference"]

# The models in reading order, with the heading each gets.
_SECTIONS: list[tuple[str, type[BaseModel]]] = [
    ("Top level", spec_module.Spec),
    ("model_tiers.<name>", spec_module.ModelTier),
    ("role_type_defaults.<type>", spec_module.RoleTypeDefault),
    ("stages[]", spec_module.Stage),
    ("stages[].role", spec_module.Role),
    ("stages[].on_fail", spec_module.OnFail),
    ("stages[].on_fail.loop", spec_module.RetryLoop),
    ("stages[].loop", spec_module.LoopConfig),
    ("stages[].gate", spec_module.Gate),
    ("stages[].tool", spec_module.ToolCall),
    ("stages[].arms[]", spec_module.Arm),
    ("stages[].bandit.context", ArmContext),
    ("stages[].bandit.context.embedding", ArmEmbedding),
    ("stages[].bandit.evolve", ArmEvolution),
    ("stages[].simulate", StageSimulation),
    ("stages[].simulate.pitfalls[]", Pitfall),
    ("stages[].cache", spec_module.StageCache),
    ("safety_rules[]", spec_module.SafetyRule),
    ("safety_rules[].condition", spec_module.Condition),
    ("http_safe[]", spec_module.HttpSafe),
    ("sandbox", SandboxSettings),
    ("mcp_servers[]", McpServer),
    ("continuation", spec_module.Continuation),
    ("triggers[]", spec_module.Trigger),
    ("self_improvement", spec_module.SelfImprovement),
    ("finetune", spec_module.FinetuneConfig),
    ("experience", spec_module.Experience),
    ("confidence", ConfidenceConfig),
    ("context (and stages[].role.context)", spec_module.ContextWindow),
    ("context.pin[]", spec_module.PinRule),
]


def _type_name(annotation: Any) -> str:
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin is None:
        if isinstance(annotation, type):
            return {"str": "text", "int": "integer", "float": "number", "bool": "bool"}.get(
                annotation.__name__,
                "mapping" if issubclass(annotation, BaseModel) else annotation.__name__,
            )
        return "any"
    name = getattr(origin, "__name__", str(origin))
    if name == "Literal":
        return " \\| ".join(str(a) for a in args)
    if name == "Annotated":
        return _type_name(args[0])
    if name in ("Union", "UnionType"):
        parts = [_type_name(a) for a in args if a is not type(None)]
        return " or ".join(parts)
    if name == "list":
        return f"list of {_type_name(args[0])}"
    if name == "dict":
        return "mapping"
    return "any"


def _default(info: Any) -> str:
    if info.is_required():
        return "**required**"
    if info.default_factory is not None:
        value = info.default_factory()
        return "`[]`" if value == [] else "`{}`" if value == {} else f"`{value!r}`"
    if info.default is None:
        return "—"
    if info.default == "":
        return '`""`'
    return f"`{info.default}`"


def spec_reference() -> str:
    """The spec reference as Markdown tables, one per model."""
    out: list[str] = []
    for heading, model in _SECTIONS:
        doc = (model.__doc__ or "").strip().replace("\n", " ")
        doc = re.sub(r"\s+", " ", doc).replace("``", "`")
        out += [
            f"#### `{heading}`",
            "",
            doc,
            "",
            "| field | type | default | meaning |",
            "| --- | --- | --- | --- |",
        ]
        for name, info in model.model_fields.items():
            desc = (info.description or "").replace("|", "\\|")
            out.append(f"| `{name}` | {_type_name(info.annotation)} | {_default(info)} | {desc} |")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def cli_reference() -> str:
    """The CLI reference: each command's usage line and help text."""
    import typer.main

    from cli import app

    group = typer.main.get_command(app)
    out: list[str] = []

    # typer vendors click; duck-type its Command/Group/Option rather than import privates.
    def walk(cmd: Any, prefix: str) -> None:
        subcommands = getattr(cmd, "commands", None)
        if subcommands is not None:
            if getattr(cmd, "invoke_without_command", False) and prefix != "armature":
                out.append(f"#### `{prefix}`")
                out.append("")
                out.append(" ".join((cmd.help or "").split()))
                out.append("")
            for name in sorted(subcommands):
                sub = subcommands[name]
                if not sub.hidden:
                    walk(sub, f"{prefix} {name}")
            return
        ctx = cmd.context_class(cmd, info_name=prefix)
        usage = " ".join(cmd.collect_usage_pieces(ctx)).replace("{", "").replace("}", "")
        help_text = (cmd.help or "").strip().split("\n\n")
        out.append(f"#### `{prefix} {usage}`".replace("  ", " "))
        out.append("")
        out.append(" ".join(help_text[0].split()))
        for extra in help_text[1:]:
            out.append("")
            out.append(" ".join(extra.split()))
        opts = [
            p for p in cmd.params if getattr(p, "param_type_name", "") == "option" and not p.hidden
        ]
        if opts:
            out.append("")
            for opt in opts:
                # A boolean pair (--wait/--no-wait) is one option written as the user types it.
                secondary = list(getattr(opt, "secondary_opts", None) or [])
                shown = [*opt.opts[:-1], "/".join([opt.opts[-1], *secondary])]
                names = ", ".join(f"`{o}`" for o in shown)
                long = [o for o in opt.opts if o.startswith("--")] or list(opt.opts)
                word = opt.metavar or long[0].lstrip("-").replace("-", "_").upper()
                metavar = "" if getattr(opt, "is_flag", False) else f" {word}"
                out.append(f"- {names}{metavar}: {opt.help or ''}")
        out.append("")

    walk(group, "armature")
    return "\n".join(out).rstrip() + "\n"


def replace_block(text: str, marker: str, body: str) -> str:
    """Put ``body`` between ``<!-- marker:start -->`` and ``<!-- marker:end -->``."""
    start, end = f"<!-- {marker}:start -->", f"<!-- {marker}:end -->"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    if not pattern.search(text):
        raise ValueError(f"markers {start} ... {end} not found")
    return pattern.sub(lambda _: f"{start}\n{body}{end}", text)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m armature_temporal.spec.docgen README.md", file=sys.stderr)
        return 2
    path = Path(argv[0])
    text = path.read_text(encoding="utf-8")
    text = replace_block(text, "spec-reference", spec_reference())
    text = replace_block(text, "cli-reference", cli_reference())
    path.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
