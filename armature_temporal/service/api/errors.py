"""The run API's errors: every refusal is JSON ``{"error": {"code", "message", "fix"}}`` with
an HTTP status, so a client can branch on ``code`` and a person can read ``fix``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from armature_temporal.errors import ArmatureError

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = ["ApiError", "error_body", "install_error_handlers"]


class ApiError(ArmatureError):
    """A request the API refuses. ``code`` is stable (``unauthorized``, ``forbidden``,
    ``not_found``, ``invalid_inputs``, ``not_waiting``, ``temporal_unreachable``, ...);
    ``message`` names the thing and the value; ``fix`` says what to do."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        fix: str,
        *,
        headers: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.fix = fix
        self.headers = headers
        self.extra = extra or {}


def error_body(code: str, message: str, fix: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "fix": fix, **extra}}


def install_error_handlers(app: FastAPI) -> None:
    """Answer :class:`ApiError`, FastAPI's request validation and unknown paths as the JSON
    error body."""
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException
    from starlette.requests import Request

    async def api_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        return JSONResponse(
            error_body(exc.code, exc.message, exc.fix, **exc.extra),
            status_code=exc.status,
            headers=exc.headers,
        )

    async def invalid(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        problems = [
            f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}" for e in exc.errors()
        ]
        return JSONResponse(
            error_body(
                "invalid_request",
                f"{request.method} {request.url.path}: " + "; ".join(problems),
                "send the body and parameters the OpenAPI schema at /openapi.json describes",
            ),
            status_code=422,
        )

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return JSONResponse(
            error_body(
                code,
                f"{request.method} {request.url.path}: {exc.detail}",
                "see GET /openapi.json (with a read token) for the paths this server has",
            ),
            status_code=exc.status_code,
            headers=getattr(exc, "headers", None),
        )

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(HTTPException, http_error)
