"""What ``armature serve`` and ``armature watch`` share: the listening and edge options, the
webhook secret's rules, and the lines they print. Imported by those two rooms only."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from armature_temporal.commands._common import err, fail

HostOpt = Annotated[str, typer.Option("--host", help="Interface to listen on.")]
PortOpt = Annotated[
    int, typer.Option("--port", "-p", min=1, max=65535, help="TCP port to listen on (1-65535).")
]
AllowUnauthenticatedFlag = Annotated[
    bool,
    typer.Option(
        "--allow-unauthenticated",
        help="Listen beyond loopback with no $ARMATURE_WEBHOOK_SECRET (anyone who can "
        "reach the port can start runs).",
    ),
]
ToleranceOpt = Annotated[
    int,
    typer.Option(
        "--signature-tolerance",
        min=1,
        metavar="SECONDS",
        help="How far a signed request's X-Armature-Timestamp may be from this server's "
        "clock, either way.",
    ),
]
BodySignaturesFlag = Annotated[
    bool,
    typer.Option(
        "--accept-body-signatures",
        help="Deprecated: also accept signatures of the body alone, without a timestamp (the "
        "older scheme; GitHub's X-Hub-Signature-256). They never expire, so each distinct "
        "body then starts at most one run, whatever its Idempotency-Key.",
    ),
]
RequestTimeoutOpt = Annotated[
    float,
    typer.Option(
        "--request-timeout",
        min=0.1,
        metavar="SECONDS",
        help="Time a client has for a request's headers, and again for its body; slower "
        "connections are closed (408 for a body).",
    ),
]
MaxConcurrencyOpt = Annotated[
    int,
    typer.Option(
        "--max-concurrency",
        min=1,
        help="Most requests served at once (event streams and the capacity kept for health, "
        "gate decisions and login come on top); more are answered 503.",
    ),
]


def webhook_secret(
    host: str, port: int, allow_unauthenticated: bool, accept_body_signatures: bool
) -> str | None:
    """$ARMATURE_WEBHOOK_SECRET, or None; exits 2 when listening beyond loopback without one
    and without ``--allow-unauthenticated``. Warns that ``--accept-body-signatures`` is
    deprecated."""
    import os

    from armature_temporal.service.api.auth import is_loopback_host

    secret = os.environ.get("ARMATURE_WEBHOOK_SECRET") or None
    if not is_loopback_host(host) and not secret and not allow_unauthenticated:
        raise fail(
            f"error: --host {host} would let anyone who can reach port {port} start runs; set "
            "$ARMATURE_WEBHOOK_SECRET (requests then need it), or pass "
            "--allow-unauthenticated if something in front of this server authenticates",
            2,
        )
    if accept_body_signatures and secret:
        err.print(
            "warning: --accept-body-signatures is deprecated: a signature of the body alone "
            "never expires, so anyone who captured one request can replay its body (each "
            "distinct body starts at most one run); have senders sign the lines "
            "'<timestamp>\\n<METHOD>\\n<path>\\n<Idempotency-Key or empty>\\n<body>' with "
            "X-Armature-Timestamp "
            "(README: Webhook triggers) and drop the flag",
            markup=False,
            highlight=False,
        )
    return secret


def require_uvicorn() -> Any:
    """The uvicorn module (with fastapi beside it), or exit 2 saying which extra brings them:
    without them `serve` printed a 60-line ModuleNotFoundError."""
    try:
        import fastapi  # noqa: F401 (the app is built on it)
        import uvicorn
    except ImportError as exc:
        from armature_temporal.extras import install_extra_hint

        raise fail(
            f"error: serving HTTP needs the serve extra (missing: {exc.name}): "
            f"{install_extra_hint('serve')}",
            2,
        ) from None
    return uvicorn


def announce_hooks(hooks: Any, host: str, port: int) -> None:
    for hook in hooks.values():
        err.print(
            f"POST http://{host}:{port}{hook.path} → spec {hook.plan.name!r}",
            markup=False,
            highlight=False,
        )


def refuse_name_clash(specs: list[Path], plans: list[Any]) -> None:
    """Exit 2 when two specs share a name: their schedules would overwrite each other's."""
    seen: dict[str, Path] = {}
    for path, plan in zip(specs, plans, strict=True):
        if plan.name in seen and seen[plan.name].resolve() != path.resolve():
            raise fail(
                f"error: {seen[plan.name]} and {path} are both spec {plan.name!r}: their "
                "schedules would overwrite each other's; rename one",
                2,
            )
        seen[plan.name] = path


def say(line: str) -> None:
    """A status line on stderr."""
    err.print(line, markup=False, highlight=False)


def token_store(host: str, port: int, allow_unauthenticated: bool, hooks: Any) -> Any:
    """The trace store holding the API tokens, once the edge checks pass (else exit 2);
    prints their warning."""
    from armature_temporal.errors import ArmatureError
    from armature_temporal.service.api.edge import (
        ServeRefused,
        api_path_clash,
        reserved_token_warning,
        token_warning,
    )
    from armature_temporal.store import TraceStore

    try:
        api_path_clash(hooks)
        store = TraceStore()
    except ServeRefused as exc:
        raise fail(f"error: {exc}", 2) from None
    except ArmatureError as exc:
        raise fail(f"error: {exc}", 1) from None
    try:
        warning = token_warning(store, host, port, allow_unauthenticated)
    except ServeRefused as exc:
        store.close()
        raise fail(f"error: {exc}", 2) from None
    for line in (warning, reserved_token_warning(store)):
        if line:
            say(line)
    return store
