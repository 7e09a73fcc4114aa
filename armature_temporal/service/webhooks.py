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
run (the namespace's retention period). A signed request without a key gets its id from its
signature, so a replayed copy is a duplicate too.

Authentication (``webhook_auth``): with a secret configured (``$ARMATURE_WEBHOOK_SECRET``),
every request but ``GET /healthz`` must carry ``Authorization: Bearer <secret>`` or a fresh
signature of its timestamp, method, path, idempotency key and body; anything else is 401,
decided on the headers before any of the body is read. The body is then read within a
deadline (408) and a size cap (413), and must be JSON of bounded depth without lone
surrogates (400). The CLI refuses to listen beyond loopback without a secret; on loopback
without one, a request from a page elsewhere (``Host`` or ``Origin`` not this machine) is
403 ``cross_site``, as in the run API.

The HTTP layer is FastAPI (the ``serve`` extra); everything that decides — which hook, which
inputs, which run id, whether a request is authentic — is plain functions here and in
``webhook_auth``, importable without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from armature_temporal.errors import ArmatureError
from armature_temporal.service.json_body import MAX_JSON_DEPTH, json_problem
from armature_temporal.service.webhook_auth import (
    DEFAULT_TOLERANCE_S,
    SIGNATURE_HEADERS,
    AuthPolicy,
    PendingSignature,
    WebhookRequestError,
    authenticate,
    check_headers,
    verify_body,
)
from armature_temporal.spec.compiler import Plan

if TYPE_CHECKING:  # the serve extra is optional
    from fastapi import FastAPI
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from temporalio.client import Client

__all__ = [
    "IDEMPOTENCY_HEADERS",
    "MAX_BODY_BYTES",
    "MAX_JSON_DEPTH",
    "SIGNATURE_HEADERS",
    "AuthPolicy",
    "Hook",
    "WebhookConfigError",
    "WebhookRequestError",
    "authenticate",
    "collect_hooks",
    "create_app",
    "delivery_run_id",
    "hook_inputs",
]

#: Headers whose value identifies one delivery; the first present wins.
IDEMPOTENCY_HEADERS = ("idempotency-key", "x-idempotency-key", "x-github-delivery")
#: Bodies larger than this are refused (413): run inputs are not bulk uploads.
MAX_BODY_BYTES = 1024 * 1024
#: A request refused on its headers with a body up to this size declared has the body read and
#: dropped before the answer, so the client gets the answer rather than a connection reset.
DRAIN_BYTES = 64 * 1024


class WebhookConfigError(ArmatureError):
    """The specs given to ``armature serve`` do not define a usable set of webhooks."""


@dataclass(frozen=True)
class Hook:
    """One webhook: the path it answers, the plan it starts, the trigger's inputs."""

    path: str
    plan: Plan
    inputs: Mapping[str, Any]
    trigger_index: int


def collect_hooks(plans: Iterable[Plan], *, required: bool = True) -> dict[str, Hook]:
    """Every webhook trigger of ``plans``, by path (none at all is fine unless ``required``).

    Raises:
        WebhookConfigError: two triggers claim one path, or (``required``) no plan has a
            webhook trigger.
    """
    hooks: dict[str, Hook] = {}
    names: list[str] = []
    for plan in plans:
        names.append(plan.name)
        for i, trigger in enumerate(plan.triggers):
            if trigger.type != "webhook" or trigger.path is None:
                continue
            _check_path(plan.name, i, trigger.path)
            if trigger.path in hooks:
                other = hooks[trigger.path]
                raise WebhookConfigError(
                    f"webhook path {trigger.path!r} is claimed twice: by spec "
                    f"{other.plan.name!r} (triggers[{other.trigger_index}]) and by spec "
                    f"{plan.name!r} (triggers[{i}]); give one of them another path"
                )
            hooks[trigger.path] = Hook(trigger.path, plan, dict(trigger.inputs), i)
    if not hooks and required:
        listed = ", ".join(repr(n) for n in names) or "none"
        raise WebhookConfigError(
            f"no webhook triggers in the specs given ({listed}); add one to a spec, e.g. "
            "triggers: [{type: webhook, path: /hooks/triage}]"
        )
    return hooks


def _check_path(spec: str, index: int, path: str) -> None:
    """A hook's path starts with '/' and holds no whitespace or control character (it could
    never be requested, and its signed string would be ambiguous)."""
    if path.startswith("/") and path.isprintable() and not any(c.isspace() for c in path):
        return
    raise WebhookConfigError(
        f"spec {spec!r} triggers[{index}]: webhook path {path!r} must start with '/' and hold "
        "no spaces or control characters, e.g. /hooks/" + spec
    )


def hook_inputs(hook: Hook, body: bytes) -> dict[str, Any]:
    """The run inputs a request body asks for, laid over the trigger's inputs.

    The caller still applies the spec's defaults and schema (``client.prepare_inputs``).

    Raises:
        WebhookRequestError: 400 for a body that is not JSON, is nested deeper than
            :data:`MAX_JSON_DEPTH` or holds a lone surrogate (``"\\ud800"``: not text, and
            not storable); 422 for JSON that is not an object.
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
    except RecursionError:  # deeper than the parser goes: far past MAX_JSON_DEPTH
        problem: tuple[str, str] | None = ("deep", "$")
    else:
        problem = json_problem(body, parsed)
    if problem is not None and problem[0] == "deep":
        raise WebhookRequestError(
            400,
            f"the body of POST {hook.path} is nested deeper than {MAX_JSON_DEPTH} levels (at "
            f"{problem[1]}); send run inputs nested at most {MAX_JSON_DEPTH} levels deep",
        )
    if problem is not None:
        raise WebhookRequestError(
            400,
            f"the body of POST {hook.path} has a lone surrogate escape at {problem[1]} (such "
            'as "\\ud800", half of a UTF-16 pair): it is not text; send valid Unicode, e.g. '
            'both halves "\\ud83d\\ude00" or the character itself',
        )
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
    digest = hashlib.sha256(f"{hook.path}\n{key}".encode("utf-8", "surrogateescape"))
    return f"{hook.plan.name}-wh-{digest.hexdigest()[:16]}"


def _idempotency_key(headers: Mapping[str, str]) -> str | None:
    for name in IDEMPOTENCY_HEADERS:
        value = headers.get(name, "").strip()
        if value:
            return value
    return None


def _headers(request: Request) -> dict[str, str]:
    """A request's headers, lower-case names; values as UTF-8 with surrogateescape, so they
    encode back to the bytes sent (Starlette decodes them as Latin-1, which would turn a
    UTF-8 secret into another string)."""
    return {
        name.decode("latin-1").lower(): value.decode("utf-8", "surrogateescape")
        for name, value in request.headers.raw
    }


def create_app(
    hooks: Mapping[str, Hook],
    client: Callable[[], Awaitable[Client]],
    *,
    task_queue: str,
    secret: str | None = None,
    tolerance_s: int = DEFAULT_TOLERANCE_S,
    accept_body_signatures: bool = False,
    body_timeout_s: float = 10.0,
    loopback: bool = True,
    clock: Callable[[], float] = time.time,
) -> FastAPI:
    """The ASGI app serving ``hooks``; ``client`` returns a connected Temporal client.

    ``secret`` (None: no authentication), ``tolerance_s`` and ``accept_body_signatures`` are
    the :class:`AuthPolicy`; a body must arrive within ``body_timeout_s`` of its headers.
    There is no ``/openapi.json``, ``/docs`` or ``/redoc``: the hooks are listed at ``GET /``,
    for callers who hold the secret.

    ``loopback``: the server listens on loopback only. Without a secret it is then open to
    this machine only, as the run API is: a request whose ``Host`` is not a loopback name
    (DNS rebinding) or whose ``Origin`` is another site is refused, 403 ``cross_site``.

    Raises:
        WebhookConfigError: FastAPI (the ``serve`` extra) is not installed.
    """
    try:
        from fastapi import FastAPI
        from fastapi.responses import JSONResponse
        from starlette.requests import ClientDisconnect
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

    policy = AuthPolicy(secret, tolerance_s, accept_body_signatures)
    app = FastAPI(
        title="Armature webhooks",
        description="POST a JSON object of run inputs to a hook's path to start a run.",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,  # the schema would list every hook to anyone
    )

    def listing() -> list[dict[str, Any]]:
        return [
            {"path": h.path, "spec": h.plan.name, "version": h.plan.version, "inputs": h.inputs}
            for h in hooks.values()
        ]

    def error(status: int, message: str, *, close: bool = False) -> JSONResponse:
        # close: the body was not read; the connection goes rather than read it to the end.
        headers = {"Connection": "close"} if close else None
        return JSONResponse({"error": message}, status_code=status, headers=headers)

    def elsewhere(request: Request) -> JSONResponse | None:
        """On an open loopback server (no secret), the 403 for a request a page elsewhere
        could have sent; else None."""
        if secret or not loopback:
            return None
        from armature_temporal.service.api.auth import cross_site

        why = cross_site(request)
        if why is None:
            return None
        return JSONResponse(
            {
                "error": f"{request.method} {request.url.path} came without the webhook secret "
                f"and {why}; a loopback server without $ARMATURE_WEBHOOK_SECRET answers only "
                "programs and pages on this machine: send it to http://127.0.0.1:<port>, or "
                "set the secret and sign the request",
                "code": "cross_site",
            },
            status_code=403,
        )

    def authentic_get(request: Request, path: str) -> JSONResponse | None:
        """None for a GET of ``path`` that holds the secret, else the 401 (or 403) answer. A
        GET is signed like an empty body; a body-only signature never admits one."""
        refused = elsewhere(request)
        if refused is not None:
            return refused
        try:
            authenticate(
                policy,
                _headers(request),
                b"",
                now=clock(),
                method=request.method,
                path=path,
                allow_body_signature=False,
            )
        except WebhookRequestError as exc:
            return error(exc.status, str(exc))
        return None

    async def index(request: Request) -> JSONResponse:
        # The hook list (paths, trigger inputs) is for callers who hold the secret.
        refused = authentic_get(request, "/")
        if refused is not None:
            return refused
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

    async def read_body(request: Request) -> bytes | JSONResponse:
        """The body, read within the deadline and the cap, or the 408/413 answer."""
        declared = request.headers.get("content-length", "")
        too_big = f"body over {MAX_BODY_BYTES} bytes; send run inputs, not files"
        if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
            return error(413, too_big, close=True)
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(body_timeout_s):
                async for chunk in request.stream():  # stop at the cap, whatever it declared
                    size += len(chunk)
                    if size > MAX_BODY_BYTES:
                        return error(413, too_big, close=True)
                    chunks.append(chunk)
        except TimeoutError:
            return error(
                408,
                f"the body took over {body_timeout_s:g} s to arrive ({size} bytes by then); "
                "send the whole request at once",
                close=True,
            )
        return b"".join(chunks)

    async def refuse(request: Request, answer: JSONResponse) -> JSONResponse:
        """``answer`` to a request refused on its headers. A small declared body is read and
        dropped first (never kept), within the body deadline: closing on unread bytes makes
        the kernel reset the connection, and the client would lose the answer that says what
        to fix. A large, chunked or slow body is not waited for: the connection just closes."""
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and 0 < int(declared) <= DRAIN_BYTES:
            with contextlib.suppress(TimeoutError, ClientDisconnect):
                async with asyncio.timeout(body_timeout_s):
                    drained = 0
                    async for chunk in request.stream():
                        drained += len(chunk)
                        if drained > DRAIN_BYTES:
                            break
        answer.headers["Connection"] = "close"
        return answer

    # Plain Starlette routes below: FastAPI's parameter inference is not wanted here.
    async def deliver(request: Request) -> JSONResponse:
        refused = elsewhere(request)
        if refused is not None:
            return await refuse(request, refused)
        headers = _headers(request)
        key = _idempotency_key(headers)
        route, hook = lookup(request)
        try:  # the headers first: without credentials, no body is kept (see refuse)
            pending = check_headers(
                policy, headers, now=clock(), key=key, method=request.method, path=route
            )
        except WebhookRequestError as exc:
            if isinstance(hook, JSONResponse):  # the paths in a 404 are for the secret's holders
                return await refuse(request, error(404, f"no webhook at POST {request.url.path}"))
            return await refuse(request, error(exc.status, str(exc)))
        if isinstance(hook, JSONResponse):
            if pending is not None:  # unverified: say nothing about the paths there are
                return await refuse(request, error(404, f"no webhook at POST {request.url.path}"))
            return await refuse(request, hook)
        body = await read_body(request)
        if isinstance(body, JSONResponse):
            return body
        try:
            if pending is not None:
                verify_body(policy, pending, body)
            inputs = prepare_inputs(
                hook.plan, hook_inputs(hook, body), how="send them as keys of the JSON body"
            )
        except WebhookRequestError as exc:
            return error(exc.status, str(exc))
        except InputError as exc:
            return error(422, str(exc))
        dedupe = _dedupe_key(key, pending)
        run_id = delivery_run_id(hook, dedupe) if dedupe else None
        try:
            temporal = await client()
            handle = await start_run(
                temporal,
                hook.plan,
                inputs,
                task_queue=task_queue,
                run_id=run_id,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE if dedupe else None,
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
        route, hook = lookup(request)
        refused = authentic_get(request, route)
        if refused is not None:
            return refused
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


def _dedupe_key(key: str | None, pending: PendingSignature | None) -> str | None:
    """What the delivery's run id is derived from: the idempotency key; for a signed request
    without one, its signature (a replay within the window is the same delivery); for a
    body-only signature always the signature, as it never expires and its key is unsigned."""
    if pending is None:
        return key
    if pending.timestamp is None:
        return pending.dedupe
    return key or pending.dedupe
