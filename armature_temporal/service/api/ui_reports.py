"""``/ui`` pages with pictures: the pages ``armature dashboard SPEC --html`` and ``armature
report RUN --html`` write, served from the trace store for callers with the ``read`` scope.

- ``GET /ui/specs``: every spec with runs, linked to its dashboard.
- ``GET /ui/specs/{spec}/dashboard``: HQS, cost and latency per run with applied changes
  marked, bandit arm shares, the learning curves and calibration (a spec this server serves
  without runs: a page that says so).
- ``GET /ui/runs/{run_id}/report``: a run's stage timeline and, for a spec this server serves
  at the version the run ran, its DAG.

Who may look: the inbox session's token (``/ui/login``), or ``Authorization: Bearer`` with a
token; an open server (loopback, no tokens) lets everyone. No credential is 401, a token
without ``read`` 403. The pages run no script and fetch nothing (CSP ``default-src 'none'``).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from armature_temporal.errors import did_you_mean
from armature_temporal.service.api.deps import ServiceState, service_state
from armature_temporal.service.api.errors import ApiError
from armature_temporal.service.api.principal import Principal
from armature_temporal.service.api.ui import ui_sessions
from armature_temporal.views.svg import esc

if TYPE_CHECKING:
    from armature_temporal.store import TraceStore
    from armature_temporal.views import SpecDashboard

__all__ = ["router"]

router = APIRouter(prefix="/ui", include_in_schema=False)

#: Runs a dashboard page reads (the newest), as ``armature dashboard``'s default --limit.
DASHBOARD_RUNS = 500
_NAV = '<nav><a href="/ui">Approvals</a><a href="/ui/specs">Dashboards</a></nav>'


def _respond(html: str, status: int = 200) -> HTMLResponse:
    response = HTMLResponse(html, status_code=status)
    response.headers["Content-Security-Policy"] = (
        "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'"
    )
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"
    response.headers["Cache-Control"] = "no-store"
    return response


def _problem(status: int, title: str, message: str, fix: str) -> HTMLResponse:
    from armature_temporal.views.html import problem_html

    return _respond(problem_html(title, message, fix, _NAV), status)


def _caller(request: Request) -> Principal | HTMLResponse:
    """Who asks: the inbox session's principal, else the request's bearer token (or the open
    server's loopback caller); a problem page when nobody with ``read`` is."""
    state = service_state(request)
    sessions = ui_sessions(state)
    session = sessions.of(request)
    principal = sessions.principal(session, state.auth) if session else None
    if principal is None:
        try:
            principal = state.auth.authenticate(request)
        except ApiError as exc:
            return _problem(
                401,
                "Sign in to see this page",
                f"this page needs a token with the read scope ({exc.message})",
                "log in at /ui/login with a token (armature tokens create NAME --scope read), "
                "or send Authorization: Bearer TOKEN",
            )
    if not principal.allows("read"):
        return _problem(
            403,
            "Not allowed",
            f"token {principal.name!r} has scopes {sorted(principal.scopes)}, not read",
            "use a token with the read scope (armature tokens create NAME --scope read)",
        )
    return principal


def _store(state: ServiceState) -> TraceStore:
    from armature_temporal.store import TraceStore

    store = state.extra.get("ui_store")
    if not isinstance(store, TraceStore):
        store = state.extra["ui_store"] = TraceStore(state.store_url)
    return store


@router.get("/specs", response_class=HTMLResponse)
async def specs_page(request: Request) -> Response:
    caller = _caller(request)
    if isinstance(caller, HTMLResponse):
        return caller
    from armature_temporal.views import build_overview, load_runs
    from armature_temporal.views.html import specs_html

    store = _store(service_state(request))
    specs = await asyncio.to_thread(
        lambda: build_overview(load_runs(store, limit=DASHBOARD_RUNS * 10, records=False))
    )
    return _respond(specs_html(specs, _NAV))


@router.get("/specs/{spec}/dashboard", response_class=HTMLResponse)
async def dashboard_page(request: Request, spec: str) -> Response:
    caller = _caller(request)
    if isinstance(caller, HTMLResponse):
        return caller
    from armature_temporal.views import build_dashboard, load_runs
    from armature_temporal.views.html import dashboard_html, empty_dashboard_html

    state = service_state(request)
    store = _store(state)

    def read() -> tuple[SpecDashboard | None, list[str]]:
        runs = load_runs(store, spec=spec, limit=DASHBOARD_RUNS)
        if not runs:
            return None, sorted({r.spec_name for r in store.runs(limit=10_000)})
        board = build_dashboard(spec, runs, store.rounds(spec), store.applied_changes(spec))
        return board, []

    board, known = await asyncio.to_thread(read)
    if board is None:
        if spec in state.plans:
            return _respond(empty_dashboard_html(spec, _NAV))
        return _problem(
            404,
            "No such spec",
            f"no runs of spec {spec!r} in the trace store{did_you_mean(spec, known)}",
            f"specs with runs: {', '.join(known) or 'none yet'}; see /ui/specs",
        )
    return _respond(dashboard_html(board, _NAV, run_href=_report_href))


def _report_href(run_id: str) -> str:
    return f"/ui/runs/{quote(run_id, safe='')}/report"


@router.get("/runs/{run_id}/report", response_class=HTMLResponse)
async def report_page(request: Request, run_id: str) -> Response:
    caller = _caller(request)
    if isinstance(caller, HTMLResponse):
        return caller
    from armature_temporal.views import build_report, load_run
    from armature_temporal.views.html import report_html

    state = service_state(request)
    store = _store(state)
    found = await asyncio.to_thread(load_run, store, run_id)
    if found is None:
        recent = [r.run_id for r in await asyncio.to_thread(store.runs, limit=200)]
        return _problem(
            404,
            "No such run",
            f"no run {run_id!r} in the trace store{did_you_mean(run_id, recent)}",
            "list runs with `armature runs list` or GET /runs; each spec's dashboard (/ui/specs) "
            "links its runs",
        )
    trace, gates = found
    plan = state.plans.get(trace.spec_name)
    if plan is not None and plan.spec_hash != trace.spec_hash:
        plan = None
    view = build_report(trace, gates, plan=plan)
    missing = (
        None
        if plan is not None or view.dag
        else f"This run was recorded before runs named their DAG, and this server does not "
        f"serve spec {trace.spec_name!r} at the version it ran "
        f"(spec_hash {trace.spec_hash[:12]}): "
        f"`armature report {run_id} --html FILE --spec SPEC_FILE` draws it."
    )
    nav = _NAV[:-6] + f'<a href="/ui/specs/{esc(quote(trace.spec_name, safe=""))}/dashboard">'
    nav += f"{esc(trace.spec_name)} dashboard</a></nav>"
    return _respond(report_html(view, nav, dag_missing=missing))
