"""What every room of the ``armature`` command shares: the two consoles, the options several
commands take, and the helpers that print, fail, run coroutines and open the Temporal client,
a spec and the trace store. One place for each.

Heavy modules (the Temporal client, the store, the service layer) are imported inside the
functions that use them, so that ``armature --help`` stays fast.
"""

from __future__ import annotations

import json
import sys
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from armature_temporal.errors import ArmatureError, SpecError

if TYPE_CHECKING:
    from armature_temporal.spec.compiler import Plan
    from armature_temporal.spec.loader import LoadedSpec

out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)

# The headings `armature --help` lists the commands under, one per room of this package.
WRITE = "Write specs"
RUN = "Run and approve"
LEARN = "Learn and improve"
INSPECT = "Inspect the record"
STACK = "Run the stack"

# Whether the command running now was given --json: its errors then go to stdout as JSON too.
# Set by JsonFlag's callback, which click calls on every invocation, flag given or not, and
# cleared when the command's context closes (tests run many commands in one process).
_json_mode: ContextVar[bool] = ContextVar("armature_json_mode", default=False)


def json_errors(on: bool) -> bool:
    """Say whether this command's errors are also printed on stdout as JSON (``--json``, or
    an older spelling of it such as ``--format json``); returns ``on``."""
    _json_mode.set(on)
    return on


def _json_flag(ctx: typer.Context, on: bool) -> bool:
    ctx.call_on_close(lambda: _json_mode.set(False))
    return json_errors(on)


JsonFlag = Annotated[
    bool, typer.Option("--json", help="Print machine-readable JSON.", callback=_json_flag)
]
SpecArg = Annotated[Path, typer.Argument(help="The spec file.", show_default=False, metavar="SPEC")]
#: A spec by file or by name, for commands that read what the store keeps of a spec.
SpecNameArg = Annotated[
    str,
    typer.Argument(help="A spec file, or a spec's name.", show_default=False, metavar="SPEC"),
]
OptionalSpecNameArg = Annotated[
    str | None,
    typer.Argument(
        help="Only this spec's: a spec file, or a spec's name.",
        show_default=False,
        metavar="[SPEC]",
    ),
]


def spec_name_of(spec: str) -> str:
    """A spec's name as given, or the name inside the spec file when ``spec`` is a path to
    one (exit 2 if that file is not a valid spec)."""
    path = Path(spec)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return load_or_exit(path).name
    return spec


def one_spec(positional: str | None, option: str | None) -> str | None:
    """The spec a listing is narrowed to, given as ``SPEC`` or ``--spec`` (a file or a name;
    both at once must agree)."""
    names = [spec_name_of(v) for v in (positional, option) if v is not None]
    if len(set(names)) > 1:
        raise fail(f"error: SPEC {positional!r} and --spec {option!r} name different specs", 2)
    return names[0] if names else None


AddressOpt = Annotated[
    str | None,
    typer.Option(
        "--address",
        help="Temporal server host:port (default: $TEMPORAL_ADDRESS, else "
        "the local dev server, started if needed).",
    ),
]
QueueOpt = Annotated[
    str | None,
    typer.Option("--task-queue", help="Task queue (default: $ARMATURE_TASK_QUEUE or 'armature')."),
]


def print_json(value: Any) -> None:
    """Write ``value`` to stdout as indented JSON (anything JSON lacks as its ``str``)."""
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False, default=str) + "\n")


def print_wide(renderable: Any) -> None:
    """Print a rich renderable on stdout, wider than the console (80 columns when piped) when
    its tables need it to keep one-line values whole; long text wraps within its column."""
    from rich.console import Console

    from armature_temporal.views.render import fitting_width

    width = fitting_width(renderable, out.width)
    if width <= out.width:
        out.print(renderable)
    else:
        Console(width=width, soft_wrap=True).print(renderable)  # `out`, wider


def fail(message: str, code: int = 1, **details: Any) -> typer.Exit:
    """Print ``message`` on stderr and return the exit to raise: ``raise fail(...)``.

    Under ``--json``, stdout also gets ``{"error": message, "code": code, **details}``, so a
    script reading stdout learns why there is no data.
    """
    err.print(message, markup=False, highlight=False)
    _json_error(message.removeprefix("error: "), code, **details)
    return typer.Exit(code)


def _json_error(message: str, code: int, **details: Any) -> None:
    if _json_mode.get():
        print_json({"error": message, "code": code, **details})


def shorten(value: Any, width: int = 70) -> str:
    """``value`` on one line (JSON unless it is a string), cut to ``width`` with an ellipsis."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def load_or_exit(path: Path) -> Plan:
    """The compiled plan of the spec at ``path``; on an invalid spec, its issues on stderr
    and exit 2."""
    return loaded_or_exit(path)[1]


def loaded_or_exit(path: Path) -> tuple[LoadedSpec, Plan]:
    """The spec at ``path`` as loaded, and its compiled plan (one read and parse, for a
    command that needs what the plan leaves out, such as knowledge.sources); on an invalid
    spec, its issues on stderr and exit 2."""
    try:
        from armature_temporal.spec.compiler import compile_spec
        from armature_temporal.spec.loader import load_spec

        loaded = load_spec(path)
        return loaded, compile_spec(loaded)
    except SpecError as exc:
        issues = [str(issue) for issue in exc.issues] or [f"{path}: invalid spec"]
        for issue in issues:
            err.print(issue, markup=False, highlight=False)
        more = f" (and {len(issues) - 1} more)" if len(issues) > 1 else ""
        _json_error(issues[0] + more, 2, issues=issues)
        raise typer.Exit(2) from None


def run_coroutine(coro: Any) -> Any:
    """Run a coroutine, turning Armature's errors into clean messages and exit codes."""
    import asyncio

    from temporalio.service import RPCError

    from armature_temporal.service.client import (
        ConnectionFailed,
        GateError,
        InputError,
        RunNotFound,
    )

    try:
        return asyncio.run(coro)
    except (InputError, GateError) as exc:
        raise fail(f"error: {exc}", 2) from None
    except RunNotFound as exc:
        raise fail(f"error: {exc}", 2) from None
    except ConnectionFailed as exc:
        raise fail(f"error: {exc}", 1) from None
    except ArmatureError as exc:
        raise fail(f"error: {exc}", 1) from None
    except RPCError as exc:
        # The server answered badly or not at all mid-command (a timeout, an overloaded or
        # broken dev server): one line with what to check, not a traceback.
        raise fail(
            f"error: the Temporal server did not complete the request ({exc.status.name}: "
            f"{exc.message}); check it with `armature doctor` (a local dev server that is "
            "stuck: `armature dev stop`, then try again)",
            1,
        ) from None


async def temporal_client(address: str | None, *, start_local: bool = False) -> Any:
    """A Temporal client for ``--address`` (else $TEMPORAL_ADDRESS, else the local dev
    server). With ``start_local``, the local stack is started when needed, saying so on
    stderr."""
    from armature_temporal.service.client import connect
    from armature_temporal.service.devstack import stack_client
    from armature_temporal.settings import configured_address, dev_port

    if start_local:
        client, said = await stack_client(address)
        for line in said:
            err.print(line, markup=False, highlight=False)
        return client
    return await connect(configured_address(address) or f"127.0.0.1:{dev_port()}")


async def queue_pollers(client: Any, queue: str, *, activities: bool = False) -> int:
    """How many workers poll the task queue ``queue`` for workflow tasks (``activities``: for
    activity tasks), as the server last saw them: a worker stopped in the last few minutes may
    still count."""
    from datetime import timedelta

    from temporalio.api.enums.v1 import TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

    kind = (
        TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY
        if activities
        else TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW
    )
    answer = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace, task_queue=TaskQueue(name=queue), task_queue_type=kind
        ),
        timeout=timedelta(seconds=5),
    )
    return len(answer.pollers)


def open_store() -> tuple[Any, str]:
    """The trace store ($ARMATURE_DB_URL, else SQLite under $ARMATURE_HOME) and where it is
    (for messages), or exit 1.

    Reading never creates a SQLite file: when there is none yet, an empty store in memory
    stands in for it.
    """
    from armature_temporal.store import TraceStore, database_url

    url = database_url()
    missing = url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists()
    try:
        store = TraceStore("sqlite:///:memory:" if missing else url)
    except ArmatureError as exc:
        raise fail(f"error: {exc}", 1) from None
    return store, url if missing else str(store.engine.url.render_as_string(hide_password=True))


def run_round(
    workflow: str,
    payload: Any,
    result_type: type,
    workflow_id: str,
    summary: str,
    *,
    wait: bool,
    address: str | None,
    queue: str | None,
    as_json: bool,
) -> Any:
    """Start one round of a loop workflow (Improve, Finetune, Learn), ``workflow_id`` being
    ``<kind>-<spec>-<hex>``. Without ``wait`` it prints the id and link; with ``--json`` the
    result as JSON; both return None. Otherwise it returns the result for the caller to show.
    Phases go to stderr from the round's ``progress`` query. Exits 1 when the round fails."""
    from temporalio.client import WorkflowFailureError

    async def go() -> Any:
        import asyncio

        from armature_temporal.service.client import ensure_search_attributes
        from armature_temporal.settings import task_queue, ui_url

        client = await temporal_client(address, start_local=True)
        await ensure_search_attributes(client)
        handle = await client.start_workflow(
            workflow,
            payload,
            id=workflow_id,
            task_queue=queue or task_queue(),
            result_type=result_type,
            static_summary=summary,
        )
        link = ui_url(handle.id, handle.result_run_id)
        if not wait:
            return {"id": handle.id, "ui_url": link}
        err.print(f"started {handle.id} — {link}", markup=False, highlight=False)
        result_task = asyncio.ensure_future(handle.result())
        said = ""
        while not result_task.done():
            try:
                progress = await handle.query("progress", result_type=dict)
            except Exception:  # not started yet, or done between polls
                progress = {}
            line = progress_line(progress)
            if line and line != said:
                err.print(f"  {line}", markup=False, highlight=False)
                said = line
            await asyncio.wait({result_task}, timeout=1.0)
        return result_task.result()

    try:
        result = run_coroutine(go())
    except WorkflowFailureError as exc:
        # The useful sentence is the innermost cause (an activity's ApplicationError).
        cause: BaseException | None = exc.cause
        while cause is not None and cause.__cause__ is not None:
            cause = cause.__cause__
        message = getattr(cause, "message", None) or str(cause)
        raise fail(f"error: {workflow_id} failed: {message}", 1) from None
    key = workflow_id.split("-", 1)[0] + "_id"
    if isinstance(result, dict):
        if as_json:
            print_json({key: result["id"], "ui_url": result["ui_url"]})
        else:
            out.print(f"started {result['id']}", markup=False)
            out.print(f"Web UI: {result['ui_url']}", markup=False)
        return None
    if as_json:
        print_json({key: workflow_id, **result.model_dump(mode="json")})
        if getattr(result, "status", None) == "failed":
            raise typer.Exit(1)
        return None
    return result


def progress_line(progress: dict[str, Any]) -> str:
    phase = str(progress.get("phase", ""))
    if phase in ("verifying", "replaying"):
        what = "verification" if phase == "verifying" else "replay"
        return f"{phase} ({progress.get('runs_done')}/{progress.get('runs_total')} {what} runs)"
    return phase
