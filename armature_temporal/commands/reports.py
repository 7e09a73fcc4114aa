"""Inspect the record: ``armature report``, ``dashboard``, ``traces verify`` (its own module,
:mod:`.traces_verify`) and ``export-traces``. They read only the trace store, so they work
when Temporal is gone."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from armature_temporal.commands._common import (
    INSPECT,
    JsonFlag,
    err,
    fail,
    json_errors,
    open_store,
    out,
    print_json,
    print_wide,
    spec_name_of,
)
from armature_temporal.commands.traces_verify import traces_app
from armature_temporal.errors import did_you_mean

app = typer.Typer()

HtmlOpt = Annotated[
    Path | None,
    typer.Option(
        "--html",
        help="Write a self-contained HTML page with charts (inline SVG, nothing fetched) to "
        "FILE instead of printing.",
        metavar="FILE",
        dir_okay=False,
    ),
]


def _html_target(path: Path | None) -> Path | None:
    """``--html``'s FILE, checked before anything is read: its folder must exist."""
    if path is None:
        return None
    folder = path.parent
    if not folder.is_dir():
        raise fail(
            f"error: --html {str(path)!r}: folder {str(folder)!r} does not exist; create it "
            f"(mkdir -p {folder}) or give a FILE in an existing folder",
            2,
        )
    return path


def _write_html(target: Path, page: str, as_json: bool) -> None:
    try:
        target.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise fail(
            f"error: --html: cannot write {str(target)!r}: {exc.strerror or exc}; give a FILE "
            "you may write",
            1,
        ) from None
    err.print(f"wrote {target} ({len(page.encode()):,} bytes)", markup=False, highlight=False)
    if as_json:
        print_json({"html": str(target), "bytes": len(page.encode())})


def _is_spec_file(spec: str | None) -> bool:
    return spec is not None and Path(spec).suffix in (".yaml", ".yml") and Path(spec).is_file()


def _plan_of(path: Path) -> Any:
    from armature_temporal.commands._common import load_or_exit

    if not path.is_file():
        raise fail(
            f"error: --spec {str(path)!r}: no such file; give the spec file the run was "
            "started from",
            2,
        )
    return load_or_exit(path)


@app.command(rich_help_panel=INSPECT)
def report(
    run_id: Annotated[
        str | None, typer.Argument(help="The run id.", metavar="RUN", show_default=False)
    ] = None,
    run_id_option: Annotated[
        str | None,
        typer.Option("--run-id", help="The run id (the older spelling of RUN).", metavar="RUN"),
    ] = None,
    full: Annotated[
        bool,
        typer.Option("--full", help="Show outputs, errors and rationales whole, not cut."),
    ] = False,
    html: HtmlOpt = None,
    spec_file: Annotated[
        Path | None,
        typer.Option(
            "--spec",
            help="For a run recorded before runs named their DAG: the spec file of the version "
            "it ran, to draw its DAG and start each stage's span when its dependencies ended "
            "(it must have the run's spec_hash).",
            metavar="SPEC_FILE",
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Show a run from the trace store: its stages, every attempt (tier, model, validity,
    latency, tokens, cost, error), tool calls, gate decisions, HQS and cost, and each stage's
    evaluation: the scores of its evaluate criteria and their mean, judged after the run.

    Long values are cut to a line; --full shows them whole, --json everything. Tables wrap
    long text and widen past the terminal (or 80 columns, when piped) rather than fold
    values. Reads only the trace store, so it works for finished runs when the Temporal
    server is gone. Exits 2 when the store has no such run.

    --html FILE writes one self-contained page (inline SVG, nothing fetched) with the run's
    stage timeline (a Gantt chart of each stage and its attempts) and its DAG by topological
    level (from the run's start record; for older runs, give --spec); `armature serve` shows
    the same page at /ui/runs/RUN/report.

    Example: armature report quickstart-1a2b3c4d   (or: armature report --run-id ...)

    Example: armature report quickstart-1a2b3c4d --html run.html
    """
    from armature_temporal.views import build_report, load_run, render_report

    if run_id is not None and run_id_option is not None and run_id != run_id_option:
        raise fail(
            f"error: two run ids given, RUN {run_id!r} and --run-id {run_id_option!r}; give one",
            2,
        )
    run_id = run_id or run_id_option
    if run_id is None:
        raise fail(
            "error: which run? give its id: armature report RUN (list runs with "
            "`armature runs list`)",
            2,
        )
    target = _html_target(html)
    plan = _plan_of(spec_file) if spec_file is not None else None
    store, where = open_store()
    found = load_run(store, run_id)
    if found is None:
        recent = [r.run_id for r in store.runs(limit=200)]
        raise fail(
            f"error: no run {run_id!r} in the trace store at {where}; list runs with "
            f"`armature runs list`{did_you_mean(run_id, recent)}",
            2,
        )
    if plan is not None and plan.spec_hash != found[0].spec_hash:
        raise fail(
            f"error: --spec {str(spec_file)!r} is spec_hash {plan.spec_hash[:12]}, but run "
            f"{run_id!r} ran {found[0].spec_hash[:12]}; give the spec file of the version it "
            "ran (`git log` of the spec file), or leave --spec out (no DAG)",
            2,
        )
    view = build_report(*found, plan=plan)
    if target is not None:
        from armature_temporal.views.html import report_html

        missing = (
            None
            if plan is not None or view.dag
            else "This run was recorded before runs named their DAG: give the spec file of the "
            f"version it ran (spec_hash {view.spec_hash[:12]}) with --spec SPEC_FILE to draw "
            "its DAG."
        )
        _write_html(target, report_html(view, dag_missing=missing), as_json)
        return
    if as_json:
        print_json(view.model_dump(mode="json"))
    else:
        print_wide(render_report(view, full=full))


@app.command(rich_help_panel=INSPECT)
def dashboard(
    spec: Annotated[
        str | None,
        typer.Argument(
            help="A spec name (or spec file); without one, every spec in one line each.",
            metavar="SPEC",
            show_default=False,
        ),
    ] = None,
    watch: Annotated[
        bool, typer.Option("--watch", help="Redraw every --interval seconds until Ctrl-C.")
    ] = False,
    interval: Annotated[
        float, typer.Option("--interval", help="Seconds between redraws with --watch.", min=0.2)
    ] = 2.0,
    limit: Annotated[int, typer.Option("--limit", help="Read the newest N runs.", min=1)] = 500,
    html: HtmlOpt = None,
    as_json: JsonFlag = False,
    fmt: Annotated[
        Literal["terminal", "json"] | None,
        typer.Option(
            "--format",
            "-f",
            help="terminal or json; --format json is --json (the older spelling).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Show how a spec is doing, from the trace store: HQS per spec version (with a
    sparkline of its trend), failure taxonomy counts, run latency p50/p95, tokens and cost,
    the configurations (stage, tier, model, arm) its attempts used, and per LLM stage how its
    confidence predicted the judge's score or the gate (reliability table, Brier score,
    hedging rate of its final outputs).

    Invalid model attempts each count as output_invalid; other failures count once per
    stage. With --watch --json, prints one JSON document per line at each redraw. Exits 2
    when the store has no runs of SPEC.

    --html FILE writes one self-contained page (inline SVG, nothing fetched) for SPEC: HQS,
    cost and latency per run with applied improvements marked, bandit arm shares over time,
    the improvement and memory loops' learning curves and a reliability diagram per stage;
    `armature serve` shows the same page at /ui/specs/SPEC/dashboard. Without --html,
    --json holds what the page draws under "history".

    Example: armature dashboard specs/quickstart.yaml --html quickstart.html
    """
    from armature_temporal.views import (
        build_dashboard,
        build_overview,
        load_runs,
        render_dashboard,
        render_overview,
    )

    as_json = json_errors(as_json or fmt == "json")
    target = _html_target(html)
    if target is not None and spec is None:
        raise fail(
            "error: --html draws one spec's dashboard: give SPEC (a spec name or file), e.g. "
            "armature dashboard specs/quickstart.yaml --html board.html (`armature dashboard` "
            "lists the specs with runs)",
            2,
        )
    if target is not None and watch:
        raise fail("error: --html writes the page once; leave out --watch", 2)
    store, where = open_store()
    name = spec_name_of(spec) if spec else None

    spec_runs: list[Any] = []  # SPEC's runs as the last snapshot read them

    def snapshot() -> tuple[Any, Any]:
        if name is None:
            specs = build_overview(load_runs(store, limit=limit, records=False))
            return [s.model_dump(mode="json") for s in specs], render_overview(specs)
        runs = load_runs(store, spec=name, limit=limit)
        spec_runs[:] = runs
        board = build_dashboard(
            name,
            runs,
            store.rounds(name),
            store.applied_changes(name),
        )
        return board, render_dashboard(board)

    def with_kept_evals(board: Any, shown: Any) -> tuple[Any, Any]:
        from armature_temporal.evals.dashboard import with_evals  # `armature eval`'s results

        data = board if name is None else board.model_dump(mode="json")
        return with_evals(store, name, data, shown)

    board, shown = snapshot()
    data, shown = with_kept_evals(board, shown)
    if name is not None and target is None and not watch and _is_spec_file(spec):
        from armature_temporal.commands.bandit_status import with_ladder  # the bandits' ladder

        plan = _plan_of(Path(str(spec)))
        data, shown = with_ladder(plan, spec_runs, data, shown)
    # A spec file names a spec that exists, runs or not: its page says it has none.
    spec_exists = target is not None and _is_spec_file(spec)
    if (
        name is not None
        and not data["runs"]
        and not data.get("evals")
        and not watch
        and not spec_exists
    ):
        raise _unknown_spec(store, where, name)
    if target is not None:
        from armature_temporal.views.html import dashboard_html

        bandits: list[Any] = []
        if _is_spec_file(spec):
            from armature_temporal.commands.bandit_status import stage_status

            bandits = stage_status(_plan_of(Path(str(spec))), spec_runs)
        _write_html(target, dashboard_html(board, bandits=bandits), as_json)
        return
    if not watch:
        if as_json:
            print_json(data)
        elif name is None and not data and not store.latest_evals():
            out.print(
                "no runs in the trace store yet — start one with: "
                "armature submit specs/quickstart.yaml",
                markup=False,
            )
        else:
            print_wide(shown)
        return
    import time

    try:
        if as_json:
            while True:
                sys.stdout.write(json.dumps(data, ensure_ascii=False, default=str) + "\n")
                sys.stdout.flush()
                time.sleep(interval)
                data, shown = with_kept_evals(*snapshot())
        from rich.live import Live

        with Live(shown, console=out, auto_refresh=False) as live:
            while True:
                time.sleep(interval)
                _, shown = with_kept_evals(*snapshot())
                live.update(shown, refresh=True)
    except KeyboardInterrupt:
        return


# `armature traces verify` lives in its own module (checking the record, apart from reading it).
app.add_typer(traces_app, name="traces", rich_help_panel=INSPECT)


@app.command("export-traces", rich_help_panel=INSPECT)
def export_traces(
    spec: Annotated[
        str, typer.Option("--spec", help="The spec name (or spec file) to export from.")
    ],
    fmt: Annotated[
        Literal["sft", "dpo"],
        typer.Option("--format", help="sft (supervised rows) or dpo (preference pairs)."),
    ],
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            "-o",
            help="The JSON Lines file to write; '-' (or no --output) for stdout.",
            metavar="FILE",
        ),
    ] = None,
    stage: Annotated[
        str | None, typer.Option("--stage", help="Only this stage's attempts.")
    ] = None,
    min_score: Annotated[
        float | None,
        typer.Option(
            "--min-score",
            help="sft only: keep rows from runs whose mean judge score (or HQS, for runs "
            "without judges) is at least X.",
            metavar="X",
            min=0.0,
            max=1.0,
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Write training data from a spec's traces as JSON Lines, one object per line.

    sft: one row per valid attempt of a stage that completed, {"messages": [the chat
    messages the model was sent], "output": "the reply"}.

    dpo: pairs of attempts sent the same messages (same inputs_hash) where one did better,
    {"prompt": [chat messages], "chosen": "reply", "rejected": "reply"}. A valid output beats
    an invalid one; between valid outputs of a stage a downstream judge scored, the higher
    judge score wins. Each group's best attempt is paired with every attempt it beats.

    A reply is the text of a text stage, compact JSON for a JSON stage. Attempts recorded
    without their messages are skipped. Rows go to FILE, or to stdout without --output (or
    with -o -). A count summary goes to stderr (and, with --json and a FILE, to stdout as
    JSON). Exits 2 when the store has no runs of the spec or no such stage.
    """
    from armature_temporal.finetune.export import dpo_rows, dump_jsonl, sft_rows, write_jsonl
    from armature_temporal.views import load_runs

    to_stdout = output in (None, "-")
    if to_stdout and as_json:
        raise fail(
            "error: the rows and --json's summary would both go to stdout; give --output FILE "
            "with --json",
            2,
        )
    if min_score is not None and fmt != "sft":
        raise fail("error: --min-score applies to --format sft only", 2)
    name = spec_name_of(spec)
    store, where = open_store()
    runs = load_runs(store, spec=name, limit=10**9)
    if not runs:
        raise _unknown_spec(store, where, name)
    if stage is not None:
        seen = sorted(
            {r.stage_id or "" for run in runs for r in run.records if r.kind == "attempt"}
        )
        if stage not in seen:
            raise fail(
                f"error: spec {name!r} has no model attempts of stage {stage!r}; stages with "
                f"attempts: {seen or 'none'}{did_you_mean(stage, seen)}",
                2,
            )
    if fmt == "sft":
        rows, stats = sft_rows(runs, spec=name, stage=stage, min_score=min_score)
    else:
        rows, stats = dpo_rows(runs, spec=name, stage=stage)
    if output is None or output == "-":
        dump_jsonl(rows, sys.stdout)
        sys.stdout.flush()
        err.print(stats.summary(), markup=False, highlight=False)
        return
    target = Path(output)
    try:
        write_jsonl(rows, target)
    except OSError as exc:
        raise fail(f"error: cannot write {output}: {exc.strerror or exc}", 1) from None
    err.print(stats.summary(target), markup=False, highlight=False)
    if as_json:
        print_json({**stats.model_dump(mode="json"), "output": output})


def _unknown_spec(store: Any, where: str, spec: str) -> typer.Exit:
    known = sorted({r.spec_name for r in store.runs(limit=10_000)})
    return fail(
        f"error: no runs of spec {spec!r} in the trace store at {where}; specs with "
        f"runs: {known or 'none yet'}{did_you_mean(spec, known)}",
        2,
    )
