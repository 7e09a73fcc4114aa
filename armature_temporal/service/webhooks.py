"""Webhook triggers: ``armature serve`` turns a spec's ``triggers: [{type: webhook}]`` into
HTTP endpoints that start runs.

``POST <path>`` with a JSON object body starts one run of the spec: the body's keys are run
inputs, laid over the trigger's own ``inputs``, then the spec's defaults, then checked
against the spec's input schema (422 naming the field when they do not fit). The answer is
202 with the run id and its Web UI link.

Senders retry deliveries. A request carrying ``Idempotency-Key`` (or GitHub's
``X-GitHub-Delivery``) starts its run under a workflow id derived from the path and the key,
and Temporal refuses a second start with that id, so a repeated delivery answers 200 with
``"duplicate": true`` and the run the first one started — for as long as Temporal keeps that
run (the namespace's retention period).

Authentication: with a secret configured (``$ARMATURE_WEBHOOK_SECRET``), every request but
``GET /healthz`` must carry ``Authorization: Bearer <secret>`` or an HMAC-SHA256 of the raw
body under the secret, as ``X-Armature-Signature-256: sha256=<hex>`` (GitHub's
``X-Hub-Signature-256`` is accepted too); anything else is 401. The CLI refuses to listen
beyond loopback without a secret.

The HTTP layer is FastAPI (the ``serve`` extra); everything that decides — which hook, which
inputs, which run id, whether a request is authentic — is plain functions here, importable
without it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from armature_temporal.errors import ArmatureError
from armature_temporal.spec.compiler import Plan

if TYPE_CHECKING:  # the serve extra is optional
    from fastapi import FastAPI
    from temporalio.client import Client

__all__ = [
    "IDEMPOTENCY_HEADERS",
    "MAX_BODY_BYTES",
    "SIGNATURE_HEADERS",
    "Hook",
    "WebhookConfigError",
    "authenticate",
    "collect_hooks",
    "create_app",
    "delivery_run_id",
    "hook_inputs",
]

#: Headers whose value identifies one delivery; the first present wins.
IDEMPOTENCY_HEADERS = ("idempotency-key", "x-idempotency-key", "x-github-delivery")
#: Headers that may carry ``sha256=<hex HMAC of the body>``.
SIGNATURE_HEADERS = ("x-armature-signature-256", "x-hub-signature-256")
#: Bodies larger than this are refused (413): run inputs are not bulk uploads.
MAX_BODY_BYTES = 1024 * 1024


class WebhookConfigError(ArmatureError):
    """The specs given to ``armature serve`` do not define a usable set of webhooks."""


class WebhookRequestError(ArmatureError):
    """A request the server answers with an HTTP error; ``status`` is the code."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Hook:
    """One webhook: the path it answers, the plan it starts, the trigger's inputs."""

    path: str
    plan: Plan
    inputs: Mapping[str, Any]
    trigger_index: int


def collect_hooks(plans: Iterable[Plan]) -> dict[str, Hook]:
    """Every webhook trigger of ``plans``, by path.

    Raises:
        WebhookConfigError: two triggers claim one path, or no plan has a webhook trigger.
    """
    hooks: dict[str, Hook] = {}
    names: list[str] = []
    for plan in plans:
        names.append(plan.name)
        for i, trigger in enumerate(plan.triggers):
            if trigger.type != "webhook" or trigger.path is None:
                continue
            if trigger.path in hooks:
                other = hooks[trigger.path]
                raise WebhookConfigError(
                    f"webhook path {trigger.path!r} is claimed twice: by spec "
                    f"{other.plan.name!r} (triggers[{other.trigger_index}]) and by spec "
                    f"{plan.name!r} (triggers[{i}]); give one of them another path"
                )
            hooks[trigger.path] = Hook(trigger.path, plan, dict(trigger.inputs), i)
    if not hooks:
        listed = ", ".join(repr(n) for n in names) or "none"
        raise WebhookConfigError(
            f"no webhook triggers in the specs given ({listed}); add one to a spec, e.g. "
            "triggers: [{type: webhook, path: /hooks/triage}]"
        )
    return hooks


def hook_inputs(hook: Hook, body: bytes) -> dict[str, Any]:
    """The run inputs a request body asks for, laid over the trigger's inputs.

    The caller still applies the spec's defaults and schema (``client.prepare_inputs``).

    Raises:
        WebhookRequestError: 400 for a body that is not JSON, 422 for JSON that is not an
            object.
    """
    values = dict(hook.inputs)
    if not body.strip():
        return values
    try:
        parsed = json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        raise WebhookRequestError(
            400,
            f"the body of POST {hook.path} is not JSON ({exc}); send a JSON object of "
            'run inputs, e.g. {"ticket": "..."}, or an empty body',
        ) from None
    if not isinstance(parsed, dict):
        raise WebhookRequestError(
            422,
            f"the body of POST {hook.path} must be a JSON object of run inputs, got "
            f'{type(parsed).__name__}; e.g. {{"ticket": "..."}}',
        )
    values.update(parsed)
    return values


def delivery_run_id(hook: Hook, key: str) -> str:
    """The workflow id of the run a keyed delivery starts: the same key, the same id."""
    digest = hashlib.sha256(f"{hook.path}\n{key}".encode()).hexdigest()[:16]
    return f"{hook.plan.name}-wh-{digest}"


def authenticate(secret: str | None, headers: Mapping[str, str], body: bytes) -> None:
    """Check a request against the shared secret; no secret means no check.

    ``headers`` must have lower-case names.

    Raises:
        WebhookRequestError: 401 naming the headers that would have been accepted.
    """
    if not secret:
        return
    auth = headers.get("authorization", "")
    scheme, _, token = auth.partition(" ")
    # Compared as bytes: compare_digest refuses non-ASCII str (that would be a 500, not a 401).
    if scheme.lower() == "bearer" and hmac.compare_digest(
        token.strip().encode("utf-8", "surrogateescape"), secret.encode()
    ):
        return
    expected = ("sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()).encode()
    for name in SIGNATURE_HEADERS:
        given = headers.get(name)
        if given is not None and hmac.compare_digest(
            given.strip().lower().encode("utf-8", "surrogateescape"), expected
        ):
            return
    raise WebhookRequestError(
        401,
        "missing or wrong credentials: send `Authorization: Bearer <secret>` or "
        "`X-Armature-Signature-256: sha256=<HMAC-SHA256 of the body, hex>` with the secret "
        "in $ARMATURE_WEBHOOK_SECRET of the server",
    )


def _idempotency_key(headers: Mapping[str, str]) -> str | None:
    for name in IDEMPOTENCY_HEADERS:
        value = headers.get(name, "").strip()
        if value:
            return value
    return None


def create_app(
    hooks: Mapping[str, Hook],
    client: Callable[[], Awaitable[Client]],
    *,
    task_queue: str,
    secret: str | None = None,
) -> FastAPI:
    """The ASGI app serving ``hooks``; ``client`` returns a connected Temporal client.

    Raises:
        WebhookConfigError: FastAPI (the ``serve`` extra) is not installed.
    """
    try:
        from fastapi import FastAPI, Request
        from fastapi.responses import JSONResponse
    except ImportError:
        from armature_temporal.extras import install_extra_hint

        raise WebhookConfigError(
            f"armature serve needs the serve extra: {install_extra_hint('serve')}"
        ) from None
    from temporalio.common import WorkflowIDReusePolicy
    from temporalio.exceptions import WorkflowAlreadyStartedError
    from temporalio.service import RPCError

    from armature_temporal.service.client import (
        ConnectionFailed,
        InputError,
        prepare_inputs,
        start_run,
    )
    from armature_temporal.settings import ui_url

    app = FastAPI(
        title="Armature webhooks",
        description="POST a JSON object of run inputs to a hook's path to start a run.",
        docs_url=None,
        redoc_url=None,
    )

    def listing() -> list[dict[str, Any]]:
        return [
            {"path": h.path, "spec": h.plan.name, "version": h.plan.version, "inputs": h.inputs}
            for h in hooks.values()
        ]

    def error(status: int, message: str) -> JSONResponse:
        return JSONResponse({"error": message}, status_code=status)

    async def index(request: Request) -> JSONResponse:
        # The hook list (paths, trigger inputs) is for callers who hold the secret.
        try:
            authenticate(secret, {k.lower(): v for k, v in request.headers.items()}, b"")
        except WebhookRequestError as exc:
            return error(exc.status, str(exc))
        return JSONResponse({"hooks": listing(), "auth": "required" if secret else "none"})

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {"ok": True, "hooks": len(hooks)}

    def lookup(request: Request) -> tuple[str, Hook | JSONResponse]:
        """The hook a request addresses, or the 404 answer listing the ones there are."""
        route = "/" + str(request.path_params["path"])
        hook = hooks.get(route)
        if hook is None:
            known = ", ".join(sorted(hooks)) or "none"
            return route, error(
                404, f"no webhook at {request.method} {route}; this server has: {known}"
            )
        return route, hook

    # Plain Starlette routes below: FastAPI's parameter inference is not wanted here.
    async def deliver(request: Request) -> JSONResponse:
        headers = {k.lower(): v for k, v in request.headers.items()}
        _, hook = lookup(request)
        if isinstance(hook, JSONResponse):
            try:  # the list of paths in a 404 is for callers who hold the secret
                authenticate(secret, headers, b"")
            except WebhookRequestError:
                return error(404, f"no webhook at POST {request.url.path}")
            return hook
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
            return error(413, f"body over {MAX_BODY_BYTES} bytes; send run inputs, not files")
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():  # stop reading at the cap, whatever it declared
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                return error(413, f"body over {MAX_BODY_BYTES} bytes; send run inputs, not files")
            chunks.append(chunk)
        body = b"".join(chunks)
        try:
            authenticate(secret, headers, body)
            inputs = prepare_inputs(
                hook.plan, hook_inputs(hook, body), how="send them as keys of the JSON body"
            )
        except WebhookRequestError as exc:
            return error(exc.status, str(exc))
        except InputError as exc:
            return error(422, str(exc))
        key = _idempotency_key(headers)
        run_id = delivery_run_id(hook, key) if key else None
        try:
            temporal = await client()
            handle = await start_run(
                temporal,
                hook.plan,
                inputs,
                task_queue=task_queue,
                run_id=run_id,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE if key else None,
            )
        except WorkflowAlreadyStartedError as exc:
            return JSONResponse(
                {
                    "run_id": exc.workflow_id,
                    "spec": hook.plan.name,
                    "duplicate": True,
                    "ui_url": ui_url(exc.workflow_id),
                },
                status_code=200,
            )
        except ConnectionFailed as exc:
            return error(503, str(exc))
        except RPCError as exc:
            return error(503, f"could not start the run on Temporal: {exc}")
        return JSONResponse(
            {
                "run_id": handle.id,
                "temporal_run_id": handle.result_run_id,
                "spec": hook.plan.name,
                "duplicate": False,
                "ui_url": ui_url(handle.id, handle.result_run_id),
            },
            status_code=202,
        )

    async def describe(request: Request) -> JSONResponse:
        # GET on a hook (someone trying the URL in a browser): say how to use it.
        try:
            authenticate(secret, {k.lower(): v for k, v in request.headers.items()}, b"")
        except WebhookRequestError as exc:
            return error(exc.status, str(exc))
        route, hook = lookup(request)
        if isinstance(hook, JSONResponse):
            return hook
        return JSONResponse(
            {
                "error": f"{route} starts runs of spec {hook.plan.name!r} on POST, with a JSON "
                "object of run inputs as the body, e.g. curl -X POST <this url> -d "
                '\'{"name": "value"}\'',
                "inputs_schema": hook.plan.inputs_schema,
                "trigger_inputs": dict(hook.inputs),
            },
            status_code=405,
            headers={"Allow": "POST"},
        )

    app.router.add_route("/", index, methods=["GET"])
    app.router.add_route("/{path:path}", deliver, methods=["POST"])
    app.router.add_route("/{path:path}", describe, methods=["GET"])
    return app
