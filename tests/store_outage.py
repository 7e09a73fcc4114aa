"""A trace store that really goes away: a loopback TCP proxy in front of PostgreSQL that a test
cuts (every open connection reset, new ones refused) and restores on the same port.

:func:`pg_database` makes a fresh database on the PostgreSQL at ``$ARMATURE_TEST_PG_URL``
(default ``postgres@127.0.0.1:5432``) and drops it after; tests skip, saying why, when there is
no server there.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from sqlalchemy.engine import URL

from tests.store.conftest import fresh_database


def pg_database() -> contextlib.AbstractContextManager[URL]:
    """A fresh PostgreSQL database, dropped on exit; skips the test when there is no server."""
    return fresh_database("armature_outage")


class StoreProxy:
    """Forwards 127.0.0.1:``port`` to the database server; :meth:`cut` and :meth:`restore`."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self.server: asyncio.Server | None = None
        self.links: set[asyncio.StreamWriter] = set()
        self.cuts = 0
        #: Accept connections but answer nothing (a store that hangs, not one that refuses).
        self.stalled = False
        #: Connections accepted while stalled.
        self.stalls = 0

    async def start(self) -> None:
        self.server = await asyncio.start_server(
            self._link, "127.0.0.1", self.port, reuse_address=True
        )
        self.port = self.server.sockets[0].getsockname()[1]

    async def cut(self, *, stall: bool = False) -> None:
        """The store is gone: open connections reset, and new ones refused (or, with
        ``stall``, accepted and never answered)."""
        assert self.server is not None
        if stall:
            self.stalled = True
        else:
            self.server.close()
            self.server = None
        self._reset()
        self.cuts += 1

    async def restore(self) -> None:
        """The store is back (connections a stall held are reset, so their callers retry)."""
        self._reset()
        self.stalled = False
        if self.server is None:
            await self.start()

    def _reset(self) -> None:
        for writer in list(self.links):
            writer.transport.abort()
        self.links.clear()

    def url(self, database: URL) -> URL:
        return database.set(host="127.0.0.1", port=self.port)

    async def _link(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        if self.stalled:
            self.stalls += 1
            self.links.add(client_w)
            return
        try:
            server_r, server_w = await asyncio.open_connection(*self.target)
        except OSError:
            client_w.transport.abort()
            return
        self.links |= {client_w, server_w}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, asyncio.IncompleteReadError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.transport.abort()

        try:
            await asyncio.gather(pipe(client_r, server_w), pipe(server_r, client_w))
        finally:
            self.links -= {client_w, server_w}


@contextlib.asynccontextmanager
async def store_proxy(database: URL) -> AsyncIterator[StoreProxy]:
    proxy = StoreProxy(database.host or "127.0.0.1", database.port or 5432)
    await proxy.start()
    try:
        yield proxy
    finally:
        if proxy.server is not None:
            await proxy.cut()
