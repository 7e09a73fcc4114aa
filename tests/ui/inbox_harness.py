"""What the approval inbox's tests share: a ``fake_*`` authorizer (the real token store's
``TokenAuthorizer`` is wired in by ``armature serve``), a tiny FastAPI app with the ``/ui``
router over a real Temporal client, and a form reader."""

from __future__ import annotations

import re
import secrets
from collections.abc import Collection

from fastapi import FastAPI
from starlette.requests import Request
from temporalio.client import Client

from armature_temporal.service.api.deps import ServiceState
from armature_temporal.service.api.errors import ApiError, install_error_handlers
from armature_temporal.service.api.principal import LOOPBACK, Principal
from armature_temporal.spec.compiler import Plan


class FakeAuthorizer:
    """The Authorizer protocol over an in-memory token table; open while it holds none."""

    def __init__(self) -> None:
        self.tokens: dict[str, Principal] = {}

    def add(self, name: str, *scopes: str) -> str:
        token = "arm_" + secrets.token_urlsafe(32)
        self.tokens[token] = Principal(name, frozenset(scopes))
        return token

    def revoke(self, name: str) -> None:
        self.tokens = {t: p for t, p in self.tokens.items() if p.name != name}

    @property
    def open(self) -> bool:
        return not self.tokens

    def from_token(self, token: str) -> Principal | None:
        return self.tokens.get(token)

    def still_valid(self, credentials: Collection[str | None]) -> set[str | None]:
        return {c for c in credentials if (c in self.tokens if c is not None else self.open)}

    def authenticate(self, request: Request) -> Principal:
        header = request.headers.get("authorization", "")
        if header.startswith("Bearer "):
            principal = self.from_token(header.removeprefix("Bearer ").strip())
            if principal is not None:
                return principal
        elif self.open:
            return LOOPBACK
        raise ApiError(401, "unauthorized", "no valid token", "send a token")


def fake_inbox_app(client: Client, task_queue: str, auth: FakeAuthorizer, *plans: Plan) -> FastAPI:
    from armature_temporal.service.api import ui

    async def connected() -> Client:
        return client

    app = FastAPI()
    install_error_handlers(app)
    app.include_router(ui.router)
    app.state.armature = ServiceState(
        plans={p.name: p for p in plans}, client=connected, task_queue=task_queue, auth=auth
    )
    return app


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert found, f"no CSRF field in the page:\n{html[:2000]}"
    return found.group(1)


def gate_sections(html: str) -> list[str]:
    return re.findall(r'<section class="card gate".*?</section>', html, flags=re.S)


def png_pixels(data: bytes) -> tuple[int, int, int, bytes]:
    """Width, height, channels and raw 8-bit samples of a PNG (no Pillow in the dev extra:
    chromium writes 8-bit RGB or RGBA, non-interlaced, which is all this reads)."""
    import struct
    import zlib

    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", header)
    channels = {2: 3, 6: 4}.get(color)
    assert depth == 8 and channels and not interlace, f"unsupported PNG: {header!r}"
    raw, stride = zlib.decompress(idat), width * channels
    out = bytearray(height * stride)
    prev = bytearray(stride)
    for y in range(height):
        kind, row = (
            raw[y * (stride + 1)],
            bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)]),
        )
        if kind == 1:
            for i in range(channels, stride):
                row[i] = (row[i] + row[i - channels]) & 0xFF
        elif kind == 2:
            row = bytearray((a + b) & 0xFF for a, b in zip(row, prev, strict=True))
        elif kind == 3:
            for i in range(stride):
                left = row[i - channels] if i >= channels else 0
                row[i] = (row[i] + ((left + prev[i]) >> 1)) & 0xFF
        elif kind == 4:
            for i in range(stride):
                a = row[i - channels] if i >= channels else 0
                b, c = prev[i], prev[i - channels] if i >= channels else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                row[i] = (row[i] + pred) & 0xFF
        out[y * stride : (y + 1) * stride] = row
        prev = row
    return width, height, channels, bytes(out)
