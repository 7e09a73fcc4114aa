"""A thin client of ``armature serve``'s run API, for the sidecar pattern: the same shape as
the library call (:mod:`armature_temporal.library`), over HTTP.

>>> from armature_temporal.http_client import ServiceClient
>>> async with ServiceClient("http://127.0.0.1:8787", token="arm_...") as service:  # doctest: +SKIP
...     outputs = await service.run("quickstart", {"topic": "tide pools"})

Refusals raise :class:`ServiceError` with the API's ``code``, ``message`` and ``fix``; a run
that ends without completing raises :class:`~armature_temporal.library.RunFailed`, as the
library does. :meth:`HTTPRunHandle.events` follows ``GET /run/{id}/events`` and, when the
connection drops, reconnects with ``Last-Event-ID``: no event lost, none repeated.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field

from armature_temporal.errors import ArmatureError
from armature_temporal.library import RunTimeout, failure_of

if TYPE_CHECKING:
    from armature_temporal.service.client import CancelOutcome, RunView

__all__ = ["HTTPRunHandle", "ServiceClient", "ServiceError", "StreamEvent"]

#: The events after which a run's stream ends.
FINAL_EVENTS = ("run_complete", "run_failed")
#: The server sends a keepalive comment every 15 s; a stream silent for longer is dropped.
STREAM_READ_TIMEOUT_S = 45.0
#: Answers to an events request that mean "try again" (a restarting server, Temporal down).
RETRY_STATUSES = (502, 503, 504)
#: Reconnects in a row that bring no new event before :meth:`HTTPRunHandle.events` gives up.
MAX_RECONNECTS = 5


class ServiceError(ArmatureError):
    """The run API refused a request, or could not be reached.

    Attributes:
        code: The API's stable error code (``unauthorized``, ``forbidden``, ``unknown_run``,
            ``not_waiting``, ``invalid_inputs``, ``too_many_streams``, ``token_revoked``,
            ...), or ``unreachable`` / ``http_error`` / ``stream_lost`` from this client.
        message: What was refused, naming the thing and the value.
        fix: What to do about it.
        status: The HTTP status (0 when no answer came).
    """

    def __init__(self, code: str, message: str, fix: str, status: int) -> None:
        super().__init__(f"{message} ({code}, HTTP {status}); {fix}" if status else message)
        self.code = code
        self.message = message
        self.fix = fix
        self.status = status


class StreamEvent(BaseModel):
    """One event of ``GET /run/{id}/events`` (the server's ``RunEvent``)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    seq: int
    type: Literal[
        "stage_start",
        "stage_complete",
        "gate_waiting",
        "gate_decided",
        "run_complete",
        "run_failed",
    ]
    run_id: str
    stage: str | None = None
    at: str
    data: dict[str, Any] = Field(default_factory=dict)


def _stream_refusal(run_id: str, data: str) -> ServiceError:
    """The ``error`` event a stream ends with (a revoked token, Temporal refusing) as the
    error it stands for; the HTTP status was 200, the stream had begun."""
    try:
        error = json.loads(data)["error"]
        return ServiceError(str(error["code"]), str(error["message"]), str(error["fix"]), 200)
    except (ValueError, KeyError, TypeError):
        return ServiceError(
            "http_error",
            f"the event stream of run {run_id} ended with an error event: {data[:500]}",
            "check the server's log",
            200,
        )


def _refusal(response: httpx.Response) -> ServiceError:
    """The :class:`ServiceError` an error answer stands for (the API's JSON error body, or
    whatever else answered)."""
    try:
        body = response.json()
        error = body["error"]
        return ServiceError(
            str(error["code"]), str(error["message"]), str(error["fix"]), response.status_code
        )
    except (ValueError, KeyError, TypeError):
        text = " ".join(response.text.split())[:200] or "(no body)"
        return ServiceError(
            "http_error",
            f"{response.request.method} {response.request.url} answered HTTP "
            f"{response.status_code}: {text}",
            "check that base_url points at `armature serve` (its /health answers JSON)",
            response.status_code,
        )


class ServiceClient:
    """A client of one ``armature serve``; use it as an async context manager (or call
    :meth:`aclose`).

    Args:
        base_url: Where the server listens, e.g. ``http://127.0.0.1:8787``.
        token: An API token (``armature tokens create``); None for an open loopback server.
        timeout_s: Connect and read timeout of one request.
        transport: An httpx transport to use instead of the network (tests).
    """

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout_s: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.base_url = base_url.rstrip("/")
        self.http = httpx.AsyncClient(
            base_url=self.base_url, headers=headers, timeout=timeout_s, transport=transport
        )

    async def __aenter__(self) -> ServiceClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.http.aclose()

    async def request(
        self, method: str, path: str, *, ok: tuple[int, ...] = (200,), **kwargs: Any
    ) -> httpx.Response:
        """One request; an answer outside ``ok`` raises :class:`ServiceError`."""
        try:
            response = await self.http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise ServiceError(
                "unreachable",
                f"cannot reach the Armature service at {self.base_url} ({method} {path}: "
                f"{type(exc).__name__}: {exc})",
                "start it with `armature serve SPEC...`, or check base_url",
                0,
            ) from None
        if response.status_code not in ok:
            raise _refusal(response)
        return response

    async def health(self) -> dict[str, Any]:
        """``GET /health``: ``{"ok", "specs", "temporal"}``."""
        body: dict[str, Any] = (await self.request("GET", "/health")).json()
        return body

    async def workflows(self) -> list[dict[str, Any]]:
        """The specs the server serves (``GET /workflows``)."""
        body = (await self.request("GET", "/workflows")).json()
        return list(body["workflows"])

    async def start(
        self,
        spec: str,
        inputs: Mapping[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> HTTPRunHandle:
        """Start a run of the served spec named ``spec`` (``POST /run/async``). With
        ``idempotency_key``, the same key starts one run however often it is sent: a repeat
        returns that run's handle with ``duplicate`` True."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        body = (
            await self.request(
                "POST",
                "/run/async",
                ok=(200, 202),
                json={"spec": spec, "inputs": dict(inputs or {})},
                headers=headers,
            )
        ).json()
        return HTTPRunHandle(self, str(body["run_id"]), duplicate=bool(body.get("duplicate")))

    async def run(
        self,
        spec: str,
        inputs: Mapping[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
        timeout_s: float | None = None,
        poll_s: float = 1.0,
    ) -> dict[str, Any]:
        """Run the served spec ``spec`` to the end and return its outputs (``POST /run``,
        which waits up to 30 s; a longer run is then polled every ``poll_s``).

        Raises:
            RunFailed: the run ended without completing (naming the stage and reason).
            RunTimeout: it has not ended within ``timeout_s`` (it keeps running).
            ServiceError: the server refused (bad inputs, no such spec, a token lacking
                ``run``).
        """
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        wait = 30 if timeout_s is None else max(0, min(30, int(timeout_s)))
        response = await self.request(
            "POST",
            "/run",
            ok=(200, 202),
            params={"wait": wait},
            json={"spec": spec, "inputs": dict(inputs or {})},
            headers=headers,
            # The server holds the request up to ``wait`` seconds before it answers.
            timeout=httpx.Timeout(self.http.timeout.connect, read=wait + 30.0),
        )
        body = response.json()
        handle = HTTPRunHandle(self, str(body["run_id"]))
        if response.status_code == 200 and body.get("status") == "completed":
            return dict(body.get("outputs") or {})
        left = None if timeout_s is None else max(0.0, timeout_s - wait)
        return await handle.result(poll_s=poll_s, timeout_s=left)

    def handle(self, run_id: str) -> HTTPRunHandle:
        """A handle on a run started earlier (by anyone)."""
        return HTTPRunHandle(self, run_id)


class HTTPRunHandle:
    """One run on the service: the HTTP twin of :class:`~armature_temporal.library.RunHandle`.

    Attributes:
        run_id: The run's id.
        duplicate: True when the start that made this handle repeated an idempotency key
            (the run had been started before; nothing new was started).
    """

    def __init__(self, service: ServiceClient, run_id: str, *, duplicate: bool = False) -> None:
        self.service = service
        self.run_id = run_id
        self.duplicate = duplicate

    def __repr__(self) -> str:
        return f"HTTPRunHandle(run_id={self.run_id!r})"

    @property
    def _path(self) -> str:
        from urllib.parse import quote

        return f"/run/{quote(self.run_id, safe='')}"

    async def status(self) -> RunView:
        """``GET /run/{id}``: status, stages, outputs, waiting gates."""
        from armature_temporal.service.client import RunView

        return RunView.model_validate((await self.service.request("GET", self._path)).json())

    async def result(
        self, *, poll_s: float = 1.0, timeout_s: float | None = None
    ) -> dict[str, Any]:
        """Poll the run every ``poll_s`` until it ends; return its outputs.

        Raises:
            RunFailed: it ended without completing.
            RunTimeout: it has not ended within ``timeout_s`` (it keeps running).
        """
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        while True:
            view = await self.status()
            if view.status != "running":
                break
            if deadline is not None and loop.time() >= deadline:
                raise RunTimeout(self.run_id, timeout_s or 0.0)
            await asyncio.sleep(poll_s)
        if (view.state or view.status) != "completed":
            raise failure_of(view)
        return dict(view.outputs)

    async def approve(self, stage: str, comment: str | None = None) -> str:
        """Approve the gate ``stage`` (needs the ``approve`` scope); returns the run's answer.
        The decision records the token's name as who decided."""
        return await self._decide(stage, {"decision": "approve", "comment": comment})

    async def reject(self, stage: str, reason: str) -> str:
        """Reject the gate ``stage``, saying why; the run ends rejected."""
        return await self._decide(stage, {"decision": "reject", "reason": reason})

    async def _decide(self, stage: str, body: dict[str, Any]) -> str:
        from urllib.parse import quote

        path = f"{self._path}/gates/{quote(stage, safe='')}"
        sent = {k: v for k, v in body.items() if v is not None}
        answer = (await self.service.request("POST", path, json=sent)).json()
        return str(answer.get("answer", ""))

    async def cancel(self) -> CancelOutcome:
        """``DELETE /run/{id}``: cancel it (an ended run is left alone, and said so)."""
        from armature_temporal.service.client import CancelOutcome

        body = (await self.service.request("DELETE", self._path)).json()
        return CancelOutcome.model_validate(body)

    async def events(self, after: int = 0) -> AsyncIterator[StreamEvent]:
        """The run's events with seq above ``after``, live, ending after ``run_complete`` or
        ``run_failed``. A dropped connection is reopened with ``Last-Event-ID`` (the last seq
        received), so every event arrives once, in order; so is a stream the server
        answers 502/503/504 (restarting, or Temporal unreachable for a moment).

        Raises:
            ServiceError: the server refused, or :data:`MAX_RECONNECTS` reconnects in a row
                brought nothing (``stream_lost``).
        """
        last = after
        fruitless = 0
        while True:
            before = last
            try:
                async for event in self._stream(last):
                    if event.seq <= last:
                        continue  # a server resending what this client has
                    last = event.seq
                    yield event
                    if event.type in FINAL_EVENTS:
                        return
            except (httpx.TransportError, httpx.StreamError):
                pass  # dropped: reconnect below from ``last``
            except ServiceError as exc:
                if exc.status not in RETRY_STATUSES and exc.code != "temporal_error":
                    raise
                # The server is restarting or cannot reach Temporal for now: try again.
            fruitless = 0 if last > before else fruitless + 1
            if fruitless > MAX_RECONNECTS:
                raise ServiceError(
                    "stream_lost",
                    f"the event stream of run {self.run_id} dropped {fruitless} times in a "
                    f"row without a new event (last seq {last})",
                    f"check the server; resume with events(after={last})",
                    0,
                )
            await asyncio.sleep(min(0.1 * 2**fruitless, 5.0))

    async def _stream(self, after: int) -> AsyncIterator[StreamEvent]:
        """One connection's events (server-sent events, parsed); ends when it closes."""
        headers = {"Accept": "text/event-stream", "Last-Event-ID": str(after)}
        timeout = httpx.Timeout(self.service.http.timeout.connect, read=STREAM_READ_TIMEOUT_S)
        async with self.service.http.stream(
            "GET", f"{self._path}/events", headers=headers, timeout=timeout
        ) as response:
            if response.status_code != 200:
                await response.aread()
                raise _refusal(response)
            data: list[str] = []
            kind = ""
            async for line in response.aiter_lines():
                if line == "":
                    if data and kind == "error":
                        raise _stream_refusal(self.run_id, "\n".join(data))
                    if data:
                        yield StreamEvent.model_validate(json.loads("\n".join(data)))
                    data, kind = [], ""
                elif line.startswith(":"):
                    continue  # a keepalive comment
                else:
                    field, _, value = line.partition(":")
                    if field == "data":
                        data.append(value.removeprefix(" "))
                    elif field == "event":
                        kind = value.strip()
                    # id repeats the JSON's seq; retry is not used.
