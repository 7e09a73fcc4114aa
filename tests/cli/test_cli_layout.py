"""How the `armature` command is put together: the rooms of armature_temporal.commands, the
headings `armature --help` lists them under, and what importing it does not pull in."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import typer.main

from armature_temporal import commands
from cli import app

HEAVY = (
    "temporalio",
    "litellm",
    "torch",
    "transformers",
    "sqlalchemy",
    "fastapi",
    "uvicorn",
    "armature_temporal.store",
    "armature_temporal.service",
    "rich.table",
)
PANELS = [
    "Write specs",
    "Run and approve",
    "Learn and improve",
    "Inspect the record",
    "Run the stack",
]


def test_commands_package_exports_the_rooms() -> None:
    assert sorted(commands.__all__) == [
        "approvals",
        "authoring",
        "bandits",
        "cache",
        "doctor",
        "evals",
        "knowledge",
        "learn",
        "loops",
        "mcp",
        "memory",
        "reports",
        "review",
        "runs",
        "serve",
        "stack",
        "tokens",
        "watch",
    ]
    for name in commands.__all__:
        assert isinstance(getattr(commands, name).app, typer.Typer), name


def test_every_top_level_command_is_listed_under_a_room_heading() -> None:
    group = typer.main.get_command(app)
    panels = {name: getattr(cmd, "rich_help_panel", None) for name, cmd in group.commands.items()}
    assert {name for name, panel in panels.items() if panel not in PANELS} == set()
    exe = Path(sys.executable).parent / "armature"
    help_text = subprocess.run(
        [str(exe), "--help"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "COLUMNS": "120"},
    ).stdout
    headings = [line for line in help_text.splitlines() if line.endswith(":") and line[0] != " "]
    assert headings == ["Options:", *(f"{panel}:" for panel in PANELS)]
    for name in panels:
        assert f"\n  {name} " in help_text, name


def test_importing_the_cli_pulls_in_no_heavy_module() -> None:
    """`armature --help` stays fast: the commands import these inside their functions."""
    code = "import sys, cli; print(*sorted(sys.modules))"
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert [m for m in loaded if m.startswith(HEAVY)] == []
