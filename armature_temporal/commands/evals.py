"""``armature eval SPEC CASES.yaml``: run a spec on a file of test cases (promptfoo's shape)
and grade every run; ``--compare OTHER`` runs a second spec on the same cases and noise."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from armature_temporal.commands._common import (
    RUN,
    AddressOpt,
    JsonFlag,
    QueueOpt,
    SpecArg,
    err,
    fail,
    loaded_or_exit,
    print_json,
    print_wide,
    run_coroutine,
    temporal_client,
)

if TYPE_CHECKING:
    from armature_temporal.evals.models import Comparison, EvalResult
    from armature_temporal.spec.compiler import Plan

app = typer.Typer()

#: Exit codes: every case passed; some case failed; an error (a grader's, or a bad file).
PASSED, FAILED, ERROR = 0, 100, 1


@app.command("eval", rich_help_panel=RUN)
def eval_command(
    spec: SpecArg,
    cases_file: Annotated[
        Path,
        typer.Argument(help="The cases file (YAML, promptfoo's shape).", metavar="CASES.yaml"),
    ],
    repeat: Annotated[
        int | None,
        typer.Option(
            "--repeat",
            "-n",
            min=1,
            metavar="N",
            help="Run each case N times (replicates 0..N-1: each its own simulate noise); "
            "default: the file's `repeat:`, else 1.",
        ),
    ] = None,
    compare: Annotated[
        Path | None,
        typer.Option(
            "--compare",
            metavar="OTHER_SPEC",
            help="Also run OTHER_SPEC on the same cases with the same noise, and show per-case "
            "wins and losses and the paired 95% interval of the pass-rate difference.",
        ),
    ] = None,
    concurrency: Annotated[
        int, typer.Option("--concurrency", "-j", min=1, max=64, help="Runs at a time.")
    ] = 4,
    junit: Annotated[
        Path | None,
        typer.Option("--junit", metavar="FILE", help="Also write JUnit XML to FILE (for CI)."),
    ] = None,
    simulate: Annotated[
        bool,
        typer.Option(
            "--simulate",
            help="Run every model tier on the offline simulate provider (as `armature submit "
            "--simulate`).",
        ),
    ] = False,
    address: AddressOpt = None,
    queue: QueueOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Run SPEC on every case in CASES.yaml and grade each run.

    A case's `vars` are the run inputs; its `assert` list grades the output. Runs go through
    Temporal like `armature submit` (the local stack is started if none is configured), as
    verification runs: no gate is approved (a gated stage and what follows are held), only
    reversible tool calls run, no bandit learns, and the runs stay out of the dashboards.
    Assertions read the run's answer (the last stage, in the spec's order, that completed with
    an output; judges, gates and post-run stages aside) as text, a structured output as JSON,
    or the stage a case or assertion names with `stage:`. Results are kept in the trace store
    (`armature dashboard` shows the latest per spec version).

    \b
    Example cases file:
      repeat: 3
      defaultTest:
        assert: [{type: not-icontains, value: "as an AI"}]
      tests:
        - description: tide pools
          vars: {topic: tide pools}
          assert:
            - {type: icontains, value: tide}
            - {type: llm-rubric, value: Accurate and clear, threshold: 0.7}
            - {type: is-json, stage: outline, value: {required: [points]}}
            - {type: python, value: "file://checks.py:short_enough"}

    \b
    Assertion types (each also as not-<type>): equals, contains, icontains,
    contains-any, contains-all, icontains-any, icontains-all, starts-with, regex,
    is-json (value: an optional JSON Schema), contains-json, json-schema,
    similar (value, threshold 0.75: local embedding model), llm-rubric (a judge
    tier: `provider: <tier>`, threshold 0.5), python (module:function or
    file://path.py:function, called (output, context), returning a bool, a number
    or {pass, score, reason}).

    With repeats: each case's pass rate, pass@1 and pass@N (unbiased estimator), and a flaky
    mark where its verdict changed across repeats. A grader that errs makes its case "error",
    not "fail". Exits 0 when every case passed, 100 when some failed, 1 on an error (a
    grader's, an invalid spec or cases file, a store that cannot keep the results), 2 on bad
    options.

    Example: armature eval specs/quickstart.yaml specs/evals/quickstart.cases.yaml --repeat 5
    """
    from armature_temporal.evals.cases import CasesError, load_cases
    from armature_temporal.evals.runner import check_cases

    plans = [_plan(spec, simulate)]
    if compare is not None:
        plans.append(_plan(compare, simulate))
    try:
        cases = load_cases(cases_file)
        for plan in plans:
            check_cases(cases, plan)
    except CasesError as exc:
        raise fail(f"error: {exc}", ERROR) from None
    times = repeat or cases.repeat or 1
    results = run_coroutine(_run(plans, cases, times, concurrency, address, queue))
    kept = _keep(results)
    comparison = None
    if compare is not None:
        from armature_temporal.evals.models import compare as compare_results

        comparison = compare_results(results[0], results[1])
    if junit is not None:
        from armature_temporal.evals.junit import write_junit

        try:
            write_junit(results, junit)
        except OSError as exc:
            raise fail(f"error: --junit {junit}: cannot write it: {exc}", ERROR) from None
        err.print(f"JUnit XML written to {junit}", markup=False, highlight=False)
    if as_json:
        data: dict[str, Any] = {"evals": [r.summary() for r in results]}
        if comparison is not None:
            data["comparison"] = {
                **comparison.model_dump(mode="json"),
                "counts": comparison.counts(),
            }
        print_json(data)
    else:
        for result in results:
            _show(result)
        if comparison is not None:
            _show_comparison(comparison)
    counts = [r.counts() for r in results]
    if not kept or any(c["error"] for c in counts):
        raise typer.Exit(ERROR)
    if any(c["fail"] for c in counts):
        raise typer.Exit(FAILED)


def _plan(path: Path, simulate: bool) -> Plan:
    """The compiled plan of ``path`` (its offline copy with ``simulate``); exit 1 if invalid."""
    try:
        loaded, plan = loaded_or_exit(path)
    except typer.Exit as exc:
        raise typer.Exit(ERROR) from None if exc.exit_code == 2 else exc
    if plan.knowledge_collection is not None and loaded.spec.knowledge is not None:
        _index_knowledge(path, loaded.spec, plan.knowledge_collection)
    if not simulate:
        return plan
    from armature_temporal.spec.offline import simulated

    return simulated(plan)


def _index_knowledge(path: Path, spec: Any, collection: str) -> None:
    """Index what changed in the spec's ``knowledge.sources`` first, as ``armature submit``
    does (saying on stderr what was indexed); exit 1 when the collection cannot take them."""
    from armature_temporal.errors import ArmatureError
    from armature_temporal.knowledge.spec_sources import index_spec_knowledge, spec_embedder
    from armature_temporal.store import TraceStore

    config = spec.knowledge
    if not config.sources:
        return
    try:
        report = index_spec_knowledge(
            TraceStore(),
            path,
            collection,
            list(config.sources),
            embedder=spec_embedder(config.embedder),
            allow_hosts=spec.http_allow_hosts,
        )
    except ArmatureError as exc:
        raise fail(f"error: knowledge {collection!r}: {exc}", ERROR) from None
    err.print(
        f"knowledge {collection!r}: {len(report.indexed)} indexed, {len(report.unchanged)} "
        f"unchanged, {len(report.unreadable)} not readable",
        markup=False,
        highlight=False,
    )


async def _run(
    plans: list[Plan],
    cases: Any,
    repeat: int,
    concurrency: int,
    address: str | None,
    queue: str | None,
) -> list[EvalResult]:
    from armature_temporal.evals.runner import run_eval
    from armature_temporal.service.client import ensure_search_attributes
    from armature_temporal.settings import task_queue
    from armature_temporal.store import TraceStore

    client = await temporal_client(address, start_local=True)
    await ensure_search_attributes(client)
    total = len(plans) * len(cases.cases) * repeat
    names = " vs ".join(p.name for p in plans)
    err.print(
        f"eval {names}: {len(cases.cases)} case(s) × {repeat} repeat(s) = {total} run(s), "
        f"{concurrency} at a time",
        markup=False,
        highlight=False,
    )
    said = [0.0]

    def progress(done: int, total: int, not_passed: int) -> None:
        now = time.monotonic()
        if done == total or now - said[0] >= 1.0:
            said[0] = now
            err.print(
                f"  {done}/{total} runs graded ({not_passed} not passed)",
                markup=False,
                highlight=False,
            )

    return await run_eval(
        plans,
        cases,
        repeat=repeat,
        client=client,
        task_queue=queue or task_queue(),
        concurrency=concurrency,
        store=TraceStore(),
        progress=progress,
    )


def _keep(results: list[EvalResult]) -> bool:
    """Keep the results in the trace store; False (said on stderr) when it cannot."""
    from armature_temporal.errors import ArmatureError
    from armature_temporal.store import TraceStore

    try:
        store = TraceStore()
        for result in results:
            store.save_eval(result.summary())
    except ArmatureError as exc:
        err.print(f"error: the results could not be kept in the store: {exc}", markup=False)
        return False
    return True


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.0%}"


def _show(result: EvalResult) -> None:
    from rich.table import Table
    from rich.text import Text

    n = result.repeat
    table = Table(show_edge=False, pad_edge=False)
    columns = ["#", "case", "status", "pass rate", "pass@1"] + ([f"pass@{n}"] if n > 1 else [])
    for column in [*columns, "flaky"]:
        table.add_column(column, no_wrap=column != "case")
    table.add_column("first failing assertion", overflow="fold")
    style = {"pass": "green", "fail": "red", "error": "yellow"}
    for case in result.cases:
        table.add_row(
            str(case.index + 1),
            case.description,
            Text(case.status, style=style[case.status]),
            _pct(case.pass_rate),
            _pct(case.pass_at(1)),
            *([_pct(case.pass_at(n))] if n > 1 else []),
            "flaky" if case.flaky else "",
            case.reason,
        )
    counts = result.counts()
    print_wide(table)
    print_wide(
        Text(
            f"{result.spec_name} v{result.spec_version}: {len(result.cases)} case(s) × {n} "
            f"repeat(s): {counts['pass']} passed, {counts['fail']} failed, {counts['error']} "
            f"error(s); pass rate {_pct(result.pass_rate)}"
            + (f"; flaky: {result.flaky}" if result.flaky else "")
            + f" (eval {result.id})"
        )
    )


def _show_comparison(comparison: Comparison) -> None:
    from rich.table import Table
    from rich.text import Text

    table = Table(show_edge=False, pad_edge=False, title=f"{comparison.other} vs {comparison.base}")
    for column in ("#", "case", "base", "other", "change"):
        table.add_column(column, no_wrap=column != "case")
    style = {"win": "green", "loss": "red", "same": "", "not compared": "yellow"}
    for row in comparison.cases:
        table.add_row(
            str(row.index + 1),
            row.description,
            _pct(row.base),
            _pct(row.other),
            Text(row.change, style=style[row.change]),
        )
    print_wide(table)
    c = comparison.counts()
    print_wide(
        Text(
            f"pass rate, other − base: {comparison.mean:+.3f}, paired 95% interval "
            f"[{comparison.low:+.3f}, {comparison.high:+.3f}] over {comparison.pairs} case(s); "
            f"wins {c['win']}, losses {c['loss']}, same {c['same']}"
            + (f", not compared {c['not compared']}" if c["not compared"] else "")
        )
    )
