"""The ``armature`` command: parses arguments, calls the core, prints.

Data goes to stdout, diagnostics to stderr. Exit codes: 0 success, 1 failure, 2 usage error or
invalid spec. Every command that shows something takes ``--json``.

The commands live in :mod:`armature_temporal.commands`, one module per room; this module
builds the ``app`` from them and defines the console-script entry point, :func:`main`.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from armature_temporal import commands


class _PanelGroup(TyperGroup):
    """Lists the commands under their ``rich_help_panel`` headings in plain-text help too.

    Typer shows panels only when it formats help with rich; ``armature`` keeps click's plain
    format. The context and formatter are click's, duck-typed (typer vendors click).
    """

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        listed = [
            (name, cmd)
            for name in self.list_commands(ctx)
            if (cmd := self.get_command(ctx, name)) is not None and not cmd.hidden
        ]
        if not listed:
            return
        # One name column and width limit across panels, as in click's single list.
        width = max(len(name) for name, _ in listed)
        limit = formatter.width - 6 - width
        panels: dict[str, list[tuple[str, str]]] = {}
        for name, cmd in listed:
            panel = getattr(cmd, "rich_help_panel", None) or "Commands"
            panels.setdefault(panel, []).append((name.ljust(width), cmd.get_short_help_str(limit)))
        for panel, rows in panels.items():
            with formatter.section(panel):
                formatter.write_dl(rows)


app = typer.Typer(
    name="armature",
    help="Durable LLM agent workflows on Temporal. Write a spec in YAML, validate it, run it.\n\n"
    "Try: armature submit specs/quickstart.yaml --wait   (offline, no API key)\n\n"
    "Yours: armature new my-flow.yaml && armature validate my-flow.yaml",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
    cls=_PanelGroup,
)

# In the order `armature --help` lists them: a newcomer writes a spec, runs it, lets it
# learn, inspects what happened, and (later) runs the stack for real.
for room in (
    commands.authoring,
    commands.runs,
    commands.evals,
    commands.approvals,
    commands.loops,
    commands.learn,
    commands.knowledge,
    commands.review,
    commands.memory,
    commands.bandits,
    commands.reports,
    commands.cache,
    commands.stack,
    commands.serve,
    commands.watch,
    commands.tokens,
    commands.mcp,
    commands.doctor,
):
    app.add_typer(room.app)

# `armature runs watch` lives in its own module (commands/runs.py is near its size limit).
_watch = importlib.import_module("armature_temporal.commands.runs_watch").runs_watch
commands.runs.runs_app.command("watch")(_watch)

# `armature knowledge gaps` lives in its own module (enrichment, apart from indexing).
_gaps = importlib.import_module("armature_temporal.commands.knowledge_gaps").gaps
commands.knowledge.knowledge_app.command("gaps")(_gaps)

# `armature knowledge facts` lives in its own module (facts that outlive a run); mounted here.
_facts = importlib.import_module("armature_temporal.commands.facts").facts_app
commands.knowledge.knowledge_app.add_typer(_facts, name="facts")

# `armature bandit status|evolve` live in their own module (the ladder, evolution); mounted here.
_bandit_status = importlib.import_module("armature_temporal.commands.bandit_status")
commands.bandits.bandit_app.command("status")(_bandit_status.bandit_status)
commands.bandits.bandit_app.command("evolve")(_bandit_status.bandit_evolve)

# `armature cache eval` lives in its own module (the semantic rule's scoring); mounted here.
try:
    _eval = importlib.import_module("armature_temporal.commands.cache_eval").cache_eval
except ModuleNotFoundError:  # pragma: no cover - a checkout without it
    pass
else:
    commands.cache.cache_app.command("eval")(_eval)


def _version(value: bool) -> None:
    if value:
        from armature_temporal import __version__

        print(f"armature {__version__}")
        raise typer.Exit(0)


@app.callback()
def _startup(
    ctx: typer.Context,
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print the version and exit.",
            is_eager=True,
            callback=_version,
        ),
    ] = False,
    otel_endpoint: Annotated[
        str | None,
        typer.Option(
            "--otel-endpoint",
            metavar="URL",
            help="Send OpenTelemetry traces (OTLP over HTTP) to this collector, e.g. "
            "http://localhost:4318 (Jaeger, Phoenix, Langfuse, Grafana Tempo). Same as "
            "OTEL_EXPORTER_OTLP_ENDPOINT; a worker started so passes it to its tools worker. "
            "Prompt and reply text only with "
            "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true.",
        ),
    ] = None,
) -> None:
    """Before any command: every ARMATURE_* setting is checked once, so a bad one is a
    one-line error (exit 2) before anything starts, never a traceback in the middle of a run."""
    from armature_temporal.runtime.private import secure_home
    from armature_temporal.settings import SettingError, armature_home, check_settings
    from armature_temporal.telemetry import tracing

    if otel_endpoint is not None:
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = otel_endpoint
    # service.name in traces: armature-worker, armature-submit, ... (OTEL_SERVICE_NAME wins).
    tracing.DEFAULT_SERVICE = f"armature-{ctx.invoked_subcommand or 'cli'}"
    try:
        tracing.configure()
    except tracing.TracingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(2) from None

    try:
        check_settings()
    except SettingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(2) from None
    for line in secure_home(armature_home()):  # once: the next command finds it private
        print(f"note: {line}", file=sys.stderr)


def main() -> None:
    """Console-script entry point.

    Exits through ``os._exit`` once output is flushed: the Temporal SDK's native runtime can
    abort the interpreter during finalisation (temporalio/sdk-python#300), which would turn a
    clean exit code into 134.
    """
    import os

    try:
        app()
        code: int = 0
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    # os._exit skips atexit: send the spans this command made (waiting 1 s at most).
    from armature_temporal.telemetry import tracing

    tracing.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
