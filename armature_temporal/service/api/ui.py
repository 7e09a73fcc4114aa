"""``/ui``: the approval inbox — server-rendered HTML, no JavaScript.

- ``GET /ui``: every waiting gate (spec, run, stage, the rendered gate message, the outputs of
  the stages it depends on, and for a tool approval the exact call: tool, arguments,
  reversibility, the rule that asked), approve / reject forms with a comment, and recent
  decisions. A token without ``approve`` sees the inbox without the forms.
- ``GET|POST /ui/login`` (a token, unless the server is open), ``POST /ui/logout``.
- ``POST /ui/runs/{run_id}/gates/{stage}``: the decision, through the same validated update as
  the CLI, recorded with ``by=<token name>``.

Every POST carries the session's CSRF token (:mod:`.ui_session`) and is refused (403, nothing
written) without it, or when ``Origin``/``Referer`` names another site. Everything shown is
HTML-escaped by the templates (autoescape), so a gate message or an output cannot inject
markup.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote_plus

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from armature_temporal.runtime.models import GateInfo
from armature_temporal.service.api.deps import ServiceState, service_state
from armature_temporal.service.api.principal import Principal
from armature_temporal.service.api.ui_session import COOKIE, UiSession, UiSessions, same_origin

if TYPE_CHECKING:
    from jinja2 import Environment
    from temporalio.client import Client

    from armature_temporal.service.client import RunView

__all__ = ["GateCard", "router", "ui_sessions"]

router = APIRouter(prefix="/ui", include_in_schema=False)

#: How much of one output the inbox shows (the rest: ``armature runs show RUN``).
MAX_SHOWN = 20_000
#: A comment longer than this is refused (it lives in the run's history).
MAX_COMMENT = 4_000
#: How many gate decisions "recent decisions" shows.
RECENT_DECISIONS = 20


@cache
def _templates() -> Environment:
    from jinja2 import Environment, PackageLoader, StrictUndefined

    return Environment(
        loader=PackageLoader("armature_temporal.service.api", "templates"),
        autoescape=True,  # every value is escaped: messages and outputs are untrusted
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def ui_sessions(state: ServiceState) -> UiSessions:
    """This server's inbox sessions (made on first use; the CSRF key dies with the server)."""
    sessions = state.extra.get("ui_sessions")
    if not isinstance(sessions, UiSessions):
        sessions = state.extra["ui_sessions"] = UiSessions()
    return sessions


@dataclass
class GateCard:
    """One waiting gate as the inbox shows it."""

    run_id: str
    spec: str | None
    gate: GateInfo
    #: (stage, output as indented JSON) for each stage the gated stage depends on.
    upstream: list[tuple[str, str]] = field(default_factory=list)
    #: The gated stage's own output when it has one (a stage gate asks about it).
    own_output: str | None = None

    @property
    def action(self) -> str:
        return f"/ui/runs/{quote(self.run_id, safe='')}/gates/{quote(self.gate.stage, safe='')}"

    @property
    def tool_args(self) -> str:
        return _shown(self.gate.tool_call.args) if self.gate.tool_call else ""

    @property
    def tool_rule(self) -> str:
        rule = self.gate.tool_call.rule if self.gate.tool_call else None
        return json.dumps(rule, sort_keys=True, default=str) if rule else ""


@dataclass
class Decision:
    """A recent decision as the inbox lists it. ``claimed_by``: what an unauthenticated
    sender claimed (``by`` is then ``signal``); ``verified``: whether the store's row checks
    against its MAC (``unverified`` says why not)."""

    run_id: str
    stage: str
    decision: str
    by: str | None
    comment: str | None
    at: str | None
    claimed_by: str | None = None
    verified: bool = False
    unverified: str | None = None


def _shown(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, indent=2, default=str)
    if len(text) > MAX_SHOWN:
        text = text[:MAX_SHOWN] + f"\n… ({len(text) - MAX_SHOWN} more characters)"
    return text


def cards_of(view: RunView, state: ServiceState) -> list[GateCard]:
    """The inbox cards of one waiting run: each pending gate with what the approver needs."""
    plan = state.plans.get(view.spec_name or "")
    cards = []
    for gate in view.pending_gates:
        base = gate.stage.split("#", 1)[0]  # a tool approval inside a stage: ``stage#n``
        stage = next((s for s in plan.stages if s.id == base), None) if plan else None
        if stage is not None:
            needs = list(stage.depends_on)
        else:  # a spec this server does not serve: every finished stage, in run order
            needs = [n for n, r in view.stages.items() if r.status == "completed" and n != base]
        upstream = [(n, _shown(view.stages[n].output)) for n in needs if n in view.stages]
        own = view.stages.get(base)
        cards.append(
            GateCard(
                run_id=view.run_id,
                spec=view.spec_name,
                gate=gate,
                upstream=upstream,
                own_output=_shown(own.output) if own and own.output is not None else None,
            )
        )
    return cards


async def _views(client: Client, run_ids: list[str]) -> list[RunView | str]:
    """Each run's view, or why there is none (gone; no worker answered in time)."""
    from armature_temporal.service.client import GATE_QUERY_TIMEOUT_S, RunNotFound, show_run

    async def one(run_id: str) -> RunView | str:
        try:
            return await asyncio.wait_for(show_run(client, run_id), GATE_QUERY_TIMEOUT_S)
        except RunNotFound as exc:
            return str(exc)
        except TimeoutError:
            return (
                f"no worker answered its status query within {GATE_QUERY_TIMEOUT_S:g} s; is "
                "`armature worker` running for its task queue?"
            )

    return list(await asyncio.gather(*(one(r) for r in run_ids)))


async def inbox(
    client: Client, state: ServiceState
) -> tuple[list[GateCard], list[tuple[str, str]]]:
    """The waiting gates of runs this server serves (:mod:`.scope`), and the waiting runs
    whose gates are unknown (with why)."""
    from armature_temporal.service.api.scope import shown_in_listing
    from armature_temporal.service.client import list_runs

    waiting = [
        r
        for r in await list_runs(client, waiting_only=True, limit=100)
        if await shown_in_listing(state, client, r.run_id, r.spec_name)
    ]
    cards: list[GateCard] = []
    unknown: list[tuple[str, str]] = []
    for run, view in zip(waiting, await _views(client, [r.run_id for r in waiting]), strict=True):
        if isinstance(view, str):
            unknown.append((run.run_id, view))
            continue
        if not view.pending_gates:
            if view.reason:
                unknown.append((run.run_id, view.reason))
            continue
        cards.extend(cards_of(view, state))
    return cards, unknown


async def recent_decisions(state: ServiceState) -> tuple[list[Decision], str | None]:
    """The newest gate decisions in the trace store (stage gates and tool approvals alike),
    or why they cannot be read."""
    from sqlalchemy.exc import SQLAlchemyError

    from armature_temporal.store import TraceStore

    def read() -> list[Decision]:
        store = state.extra.get("ui_store")
        if not isinstance(store, TraceStore):
            store = state.extra["ui_store"] = TraceStore(state.store_url)
        return [
            Decision(
                r.run_id,
                r.stage_id,
                r.decision,
                r.decided_by,
                r.comment,
                r.decided_at,
                claimed_by=r.claimed_by,
                verified=r.trusted,
                unverified=r.record_problem,
            )
            for r in store.recent_gate_decisions(RECENT_DECISIONS)
        ]

    try:
        return await asyncio.to_thread(read), None
    except SQLAlchemyError as exc:
        return [], f"the trace store cannot be read ({type(exc).__name__}: {exc})"


def _page(
    name: str,
    request: Request,
    *,
    status: int = 200,
    session: UiSession | None = None,
    **values: Any,
) -> HTMLResponse:
    sessions = ui_sessions(service_state(request))
    html = (
        _templates()
        .get_template(name)
        .render(
            csrf=sessions.csrf(session) if session else "",
            **values,
        )
    )
    response = HTMLResponse(html, status_code=status)
    response.headers["Content-Security-Policy"] = (
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    )
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"
    response.headers["Cache-Control"] = "no-store"
    return response


def _set_cookie(response: Response, request: Request, session: UiSession) -> None:
    response.set_cookie(
        COOKIE,
        session.sid,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/ui",
    )


def _problem(
    request: Request,
    status: int,
    title: str,
    message: str,
    fix: str,
    session: UiSession | None = None,
) -> HTMLResponse:
    return _page(
        "problem.html",
        request,
        status=status,
        session=session,
        title=title,
        message=message,
        fix=fix,
    )


def _unreachable(request: Request, exc: Exception, then: str, session: UiSession) -> HTMLResponse:
    fix = f"start the Temporal server (or `armature dev`) and {then}; nothing was done"
    return _problem(request, 503, "Temporal is unreachable", str(exc), fix, session)


class _NotText(ValueError):
    """A form field whose bytes are not UTF-8 (a lone surrogate, say): ``field`` names it."""

    def __init__(self, field: str) -> None:
        super().__init__(field)
        self.field = field


async def _form(request: Request) -> dict[str, str]:
    """An ``application/x-www-form-urlencoded`` body (the only kind these forms send): the
    first value of each field.

    Raises:
        _NotText: a field is not UTF-8 text (``%ED%A0%80`` is a lone surrogate): refused
            rather than stored with replacement characters the person never wrote.
    """
    form: dict[str, str] = {}
    for pair in (await request.body()).split(b"&"):
        if not pair:
            continue
        raw_name, _, raw_value = pair.partition(b"=")
        name = unquote_plus(raw_name.decode("latin-1"), errors="replace")
        try:
            value = unquote_plus(raw_value.decode("utf-8"), errors="strict")
        except UnicodeDecodeError:
            raise _NotText(name) from None
        form.setdefault(name, value)
    return form


def _elsewhere(request: Request) -> HTMLResponse | None:
    """On an open server (no login), the 403 page for a request a page elsewhere could have
    sent (its Host or Origin is not this machine: DNS rebinding, another site); else None."""
    if not service_state(request).auth.open:
        return None
    from armature_temporal.service.api.auth import cross_site

    why = cross_site(request)
    if why is None:
        return None
    return _problem(
        request,
        403,
        "Refused: not from this machine",
        f"this server has no tokens, so it answers only this machine, and this request: {why}; "
        "nothing was done",
        "open the inbox at http://127.0.0.1:<port>/ui, or create a token (`armature tokens "
        "create NAME --scope read --scope approve`) and log in with it",
    )


async def _posted(request: Request) -> tuple[dict[str, str], UiSession] | HTMLResponse:
    """The form and session of a POST that carries its CSRF token from this site; else a 403
    page (nothing done)."""
    refused = _elsewhere(request)
    if refused is not None:
        return refused
    sessions = ui_sessions(service_state(request))
    session = sessions.of(request)
    try:
        form = await _form(request)
    except _NotText as exc:
        return _problem(
            request,
            400,
            "Not text",
            f"the form's field {exc.field!r} is not UTF-8 text (it holds a byte sequence such "
            "as a lone surrogate, half of a UTF-16 pair); nothing was done",
            "type the text again (paste it as plain text) and submit",
            session,
        )
    if not same_origin(request):
        sender = request.headers.get("origin") or request.headers.get("referer")
        return _problem(
            request,
            403,
            "Refused: another site",
            f"this form was posted from {sender!r}, not from this server; nothing was done",
            "open the inbox at this server's /ui and use its buttons",
        )
    if session is None or not sessions.csrf_ok(session, form.get("csrf")):
        return _problem(
            request,
            403,
            "Refused: no valid form token",
            f"{request.method} {request.url.path} came without this session's CSRF token "
            "(or the session expired); nothing was done",
            "reload /ui and submit the form again",
        )
    return form, session


@router.get("", response_class=HTMLResponse)
async def inbox_page(request: Request) -> Response:
    state = service_state(request)
    sessions = ui_sessions(state)
    session = sessions.of(request)
    principal = sessions.principal(session, state.auth) if session else None
    fresh = None
    if principal is None:
        if not state.auth.open:
            return RedirectResponse("/ui/login", status_code=303)
        refused = _elsewhere(request)
        if refused is not None:
            return refused
        session = fresh = sessions.new("open")
        principal = sessions.principal(session, state.auth)
    assert session is not None and principal is not None
    from armature_temporal.service.client import ConnectionFailed

    try:
        client = await state.client()
    except ConnectionFailed as exc:
        return _unreachable(request, exc, "reload", session)
    (cards, unknown), (decisions, store_problem) = await asyncio.gather(
        inbox(client, state), recent_decisions(state)
    )
    response = _page(
        "inbox.html",
        request,
        session=session,
        principal=principal,
        cards=cards,
        unknown=unknown,
        decisions=decisions,
        store_problem=store_problem,
        can_decide=principal.allows("approve"),
        done=sessions.take_note(session),
        open=state.auth.open,
    )
    if fresh is not None:
        _set_cookie(response, request, fresh)
    return response


@router.get("/login", response_class=HTMLResponse)
async def login_page(request: Request) -> Response:
    state = service_state(request)
    if state.auth.open:
        return RedirectResponse("/ui", status_code=303)
    sessions = ui_sessions(state)
    session = sessions.of(request)
    fresh = session is None
    if session is None:
        session = sessions.new("anonymous")
    response = _page("login.html", request, session=session, error=None)
    if fresh:
        _set_cookie(response, request, session)
    return response


@router.post("/login", response_class=HTMLResponse)
async def login(request: Request) -> Response:
    posted = await _posted(request)
    if isinstance(posted, Response):
        return posted
    form, session = posted
    state = service_state(request)
    sessions = ui_sessions(state)
    token = form.get("token", "").strip()
    principal = state.auth.from_token(token) if token else None
    if principal is None:
        return _page(
            "login.html",
            request,
            status=401,
            session=session,
            error="that token is unknown or revoked" if token else "paste an API token",
        )
    sessions.drop(session.sid)  # a new id on login: a planted session id stays anonymous
    response = RedirectResponse("/ui", status_code=303)
    _set_cookie(response, request, sessions.new("token", token))
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    posted = await _posted(request)
    if isinstance(posted, Response):
        return posted
    _, session = posted
    ui_sessions(service_state(request)).drop(session.sid)
    response = RedirectResponse("/ui/login", status_code=303)
    response.delete_cookie(COOKIE, path="/ui")
    return response


@router.post("/runs/{run_id}/gates/{stage}", response_class=HTMLResponse)
async def decide(request: Request, run_id: str, stage: str) -> Response:
    posted = await _posted(request)
    if isinstance(posted, Response):
        return posted
    form, session = posted
    state = service_state(request)
    principal: Principal | None = ui_sessions(state).principal(session, state.auth)
    if principal is None:
        return _problem(
            request,
            401,
            "Log in first",
            "this session is not logged in (or its token was revoked); nothing was done",
            "log in at /ui/login with an API token that has the 'approve' scope",
        )
    if not principal.allows("approve"):
        held = ", ".join(sorted(principal.scopes)) or "none"
        return _problem(
            request,
            403,
            "Refused: no approve scope",
            f"token {principal.name!r} may not decide gates: it holds {held}; nothing was written",
            "log in with a token that has 'approve' "
            "(`armature tokens create NAME --scope approve`)",
            session,
        )
    decision = form.get("decision", "")
    comment = form.get("comment", "").strip() or None
    if decision not in ("approve", "reject"):
        return _problem(
            request,
            400,
            "Unknown decision",
            f"decision {decision!r} is neither 'approve' nor 'reject'; nothing was written",
            "use the Approve or Reject button",
            session,
        )
    if decision == "reject" and comment is None:  # as `armature reject` and the API require
        return _problem(
            request,
            400,
            "A rejection needs a reason",
            f"rejecting gate {stage!r} of run {run_id!r} needs a reason in the comment box; "
            "nothing was written",
            "say why in the comment and press Reject again",
            session,
        )
    if comment is not None and len(comment) > MAX_COMMENT:
        return _problem(
            request,
            400,
            "Comment too long",
            f"the comment has {len(comment)} characters; at most {MAX_COMMENT} are kept in the "
            "run's history; nothing was written",
            "shorten it and submit again",
            session,
        )
    from temporalio.service import RPCError

    from armature_temporal.service.api.scope import served, unknown_run
    from armature_temporal.service.client import (
        ConnectionFailed,
        GateAuthError,
        GateError,
        RunNotFound,
        decide_gate,
    )

    try:
        client = await state.client()
        if not await served(state, client, run_id):  # another spec's run: as if it were none
            raise RunNotFound(run_id)
        answer = await decide_gate(
            client,
            run_id,
            stage,
            "approve" if decision == "approve" else "reject",
            comment=comment,
            by=principal.name,
        )
    except ConnectionFailed as exc:
        return _unreachable(request, exc, "submit again", session)
    except RPCError as exc:
        return _problem(
            request,
            503,
            "Temporal refused the request",
            f"{exc}; nothing was written",
            "submit again; if it persists, check the Temporal server and the worker logs",
            session,
        )
    except RunNotFound:
        missing = unknown_run(state, run_id)
        return _problem(request, 404, "Unknown run", missing.message, "go back to /ui", session)
    except GateAuthError as exc:
        return _problem(
            request,
            503,
            "Cannot record who decided",
            str(exc),
            "give armature serve the workers' trace key ($ARMATURE_HOME/trace.key)",
            session,
        )
    except GateError as exc:
        return _problem(
            request,
            409,
            "Not waiting",
            f"{exc}; nothing was written",
            "reload /ui: someone may have decided already",
            session,
        )
    ui_sessions(state).note(session, f"{run_id} {answer}")
    return RedirectResponse("/ui", status_code=303)
