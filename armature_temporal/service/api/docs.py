"""``GET /docs``: Swagger UI over the run API's schema, with no network beyond this server.

The page (behind the ``read`` scope, like ``/openapi.json``) carries the schema inline and
loads Swagger UI's script and stylesheet from ``/docs/assets/``, which serves the copies the
``fastapi-offline`` package ships (the serve extra installs it). The assets are public: they
are the same files for everyone and hold nothing of this server's, and a browser's request for
a ``<script src>`` would not carry the token the page was fetched with.
"""

from __future__ import annotations

import html
import json
from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = ["ASSETS", "docs_page", "install_docs"]

#: The files under ``/docs/assets/``, with their media types.
ASSETS = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
}


def install_docs(app: FastAPI) -> None:
    """Add ``GET /docs`` (read scope) and ``GET /docs/assets/{name}`` (public) to ``app``."""
    from fastapi import Depends
    from fastapi.responses import HTMLResponse, Response

    from armature_temporal.service.api.deps import require
    from armature_temporal.service.api.errors import ApiError

    @app.get("/docs", include_in_schema=False, dependencies=[Depends(require("read"))])
    async def docs() -> HTMLResponse:
        return HTMLResponse(docs_page(app.title, app.openapi()))

    @app.get("/docs/assets/{name}", include_in_schema=False)
    async def docs_asset(name: str) -> Response:
        if name not in ASSETS:
            raise ApiError(
                404,
                "not_found",
                f"no docs asset {name!r}; there are {sorted(ASSETS)}",
                "open /docs: it links the assets it needs",
            )
        return Response(
            _asset(name),
            media_type=ASSETS[name],
            headers={"Cache-Control": "public, max-age=86400"},
        )


@lru_cache(maxsize=len(ASSETS))
def _asset(name: str) -> bytes:
    from importlib.resources import files

    return (files("fastapi_offline") / "static" / name).read_bytes()


def docs_page(title: str, schema: dict[str, Any]) -> str:
    """Swagger UI with the schema inline: the page was fetched with the token, and a second
    fetch of /openapi.json from the browser would not carry it. ``validatorUrl: null``: no
    badge asks an outside validator about the schema."""
    inline = json.dumps(schema).replace("<", "\\u003c")
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title>"
        "<link rel='stylesheet' href='/docs/assets/swagger-ui.css'></head><body>"
        "<div id='swagger-ui'></div>"
        "<script src='/docs/assets/swagger-ui-bundle.js'></script>"
        "<script>SwaggerUIBundle({dom_id: '#swagger-ui', validatorUrl: null, spec: "
        f"{inline}}});</script>"
        "<noscript>The schema is at GET /openapi.json (with a read token).</noscript>"
        "</body></html>"
    )
