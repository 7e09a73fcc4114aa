"""The tool layer: workspace confinement, shell, HTTP allow-list, Python function tools."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from armature_temporal.errors import ArmatureError
from armature_temporal.tools import (
    ToolContext,
    ToolError,
    ToolRegistry,
    ToolResult,
    call_tool,
    get_tool_spec,
    register_tool,
    tool_reversibility,
)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


@pytest.fixture
def ctx(workspace: Path) -> ToolContext:
    return ToolContext(workspace=workspace, timeout_s=5, output_cap_bytes=1000)


def test_tool_layer_does_not_import_temporalio() -> None:
    code = (
        "import sys, armature_temporal.tools, armature_temporal.runtime.policy\n"
        "print([m for m in sys.modules if m.startswith('temporalio')])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_tool_result_ok_exactly_when_no_error() -> None:
    with pytest.raises(ValueError, match="no error_type"):
        ToolResult(ok=True, error_type="timeout", error="x")
    with pytest.raises(ValueError, match="needs an error_type"):
        ToolResult(ok=False)
    assert ToolResult.failure("policy_blocked", "no").error_type == "policy_blocked"


# --- files -------------------------------------------------------------------------------------


async def test_file_write_creates_parents_and_file_read_reads_it_back(
    ctx: ToolContext, workspace: Path
) -> None:
    wrote = await call_tool("file_write", {"path": "a/b/c.txt", "content": "héllo"}, ctx)
    assert wrote.ok, wrote.error
    assert wrote.output == {"path": "a/b/c.txt", "bytes_written": 6, "created": True}
    assert (workspace / "a/b/c.txt").read_text(encoding="utf-8") == "héllo"
    read = await call_tool("file_read", {"path": "a/b/c.txt"}, ctx)
    assert read.output == {"path": "a/b/c.txt", "content": "héllo", "size": 6, "truncated": False}


@pytest.mark.parametrize("tool", ["file_read", "file_write", "file_list"])
@pytest.mark.parametrize("path", ["../../etc/passwd", "/etc/passwd", "a/../../outside.txt"])
async def test_paths_outside_the_workspace_are_refused(
    ctx: ToolContext, tool: str, path: str, tmp_path: Path
) -> None:
    args: dict[str, Any] = {"path": path}
    if tool == "file_write":
        args["content"] = "pwned"
    result = await call_tool(tool, args, ctx)
    assert not result.ok
    assert result.error_type == "policy_blocked"
    assert "outside the workspace" in (result.error or "")
    assert not (tmp_path / "outside.txt").exists()


async def test_symlink_pointing_outside_is_refused(
    ctx: ToolContext, workspace: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("s3cret")
    (workspace / "link.txt").symlink_to(outside / "secret.txt")
    (workspace / "linkdir").symlink_to(outside, target_is_directory=True)

    read = await call_tool("file_read", {"path": "link.txt"}, ctx)
    assert read.error_type == "policy_blocked"
    assert "s3cret" not in json.dumps(read.output)
    write = await call_tool("file_write", {"path": "linkdir/new.txt", "content": "x"}, ctx)
    assert write.error_type == "policy_blocked"
    assert not (outside / "new.txt").exists()
    listing = await call_tool("file_list", {"path": "linkdir"}, ctx)
    assert listing.error_type == "policy_blocked"


async def test_absolute_path_inside_workspace_and_inner_symlink_are_allowed(
    ctx: ToolContext, workspace: Path
) -> None:
    (workspace / "real.txt").write_text("inside")
    (workspace / "alias.txt").symlink_to(workspace / "real.txt")
    by_absolute = await call_tool("file_read", {"path": str(workspace / "real.txt")}, ctx)
    by_link = await call_tool("file_read", {"path": "alias.txt"}, ctx)
    assert by_absolute.output["content"] == by_link.output["content"] == "inside"


async def test_file_read_caps_content_and_says_so(ctx: ToolContext, workspace: Path) -> None:
    (workspace / "big.txt").write_text("x" * 5000)
    result = await call_tool("file_read", {"path": "big.txt"}, ctx)
    assert result.ok
    assert len(result.output["content"]) == 1000
    assert result.output["truncated"] is True
    assert result.output["size"] == 5000


async def test_file_read_missing_file_is_a_tool_error(ctx: ToolContext) -> None:
    result = await call_tool("file_read", {"path": "nope.txt"}, ctx)
    assert (result.ok, result.error_type) == (False, "tool_error")
    assert "nope.txt" in (result.error or "")


async def test_file_write_over_the_cap_is_refused(workspace: Path) -> None:
    small = ToolContext(workspace=workspace, max_write_bytes=10)
    result = await call_tool("file_write", {"path": "f.txt", "content": "x" * 11}, small)
    assert result.error_type == "invalid_args"
    assert not (workspace / "f.txt").exists()


async def test_file_list_lists_one_level_or_recursively(ctx: ToolContext, workspace: Path) -> None:
    (workspace / "d").mkdir()
    (workspace / "d" / "inner.txt").write_text("1")
    (workspace / "top.txt").write_text("22")
    (workspace / "ln").symlink_to("/etc", target_is_directory=True)
    flat = await call_tool("file_list", {}, ctx)
    assert [(e["path"], e["type"]) for e in flat.output["entries"]] == [
        ("d", "dir"),
        ("ln", "symlink"),
        ("top.txt", "file"),
    ]
    deep = await call_tool("file_list", {"path": ".", "recursive": True}, ctx)
    paths = [e["path"] for e in deep.output["entries"]]
    assert "d/inner.txt" in paths
    assert not any(p.startswith("ln/") for p in paths)  # symlinked dirs are not followed


# --- shell -------------------------------------------------------------------------------------


async def test_shell_runs_without_a_shell(ctx: ToolContext) -> None:
    result = await call_tool("shell", {"argv": ["echo", "$HOME", "*", "a;b"]}, ctx)
    assert result.ok
    assert result.output == {
        "exit_code": 0,
        "stdout": "$HOME * a;b\n",
        "stderr": "",
        "truncated": False,
    }


async def test_shell_reports_a_nonzero_exit_code(ctx: ToolContext) -> None:
    code = "import sys; sys.stderr.write('bad'); sys.exit(3)"
    result = await call_tool("shell", {"argv": [sys.executable, "-c", code]}, ctx)
    assert result.ok
    assert (result.output["exit_code"], result.output["stderr"]) == (3, "bad")


async def test_shell_timeout_kills_the_command_and_keeps_partial_output(ctx: ToolContext) -> None:
    code = "import time; print('started', flush=True); time.sleep(30)"
    start = time.monotonic()
    result = await call_tool("shell", {"argv": [sys.executable, "-c", code], "timeout_s": 0.5}, ctx)
    assert time.monotonic() - start < 5
    assert (result.ok, result.error_type) == (False, "timeout")
    assert result.output["stdout"] == "started\n"
    assert result.output["exit_code"] is None


async def test_shell_timeout_is_capped_by_the_context(workspace: Path) -> None:
    short = ToolContext(workspace=workspace, timeout_s=0.5)
    start = time.monotonic()
    result = await call_tool("shell", {"argv": ["sleep", "30"], "timeout_s": 60}, short)
    assert result.error_type == "timeout"
    assert time.monotonic() - start < 5


async def test_shell_output_is_capped(ctx: ToolContext) -> None:
    code = "import sys; sys.stdout.write('x' * 200_000); sys.stderr.write('e' * 10)"
    result = await call_tool("shell", {"argv": [sys.executable, "-c", code]}, ctx)
    assert result.ok
    assert result.output["stdout"] == "x" * 1000
    assert result.output["stderr"] == "e" * 10
    assert result.output["truncated"] is True
    assert result.output["exit_code"] == 0  # the rest was drained, so the command finished


async def test_shell_cwd_is_confined_to_the_workspace(ctx: ToolContext, workspace: Path) -> None:
    (workspace / "sub").mkdir()
    inside = await call_tool("shell", {"argv": ["pwd"], "cwd": "sub"}, ctx)
    assert inside.output["stdout"].strip() == str((workspace / "sub").resolve())
    outside = await call_tool("shell", {"argv": ["pwd"], "cwd": "../.."}, ctx)
    assert outside.error_type == "policy_blocked"


async def test_shell_does_not_pass_the_workers_secrets(
    ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-do-not-leak")
    result = await call_tool("shell", {"argv": ["env"]}, ctx)
    assert result.ok
    assert "sk-do-not-leak" not in result.output["stdout"]
    assert "PATH=" in result.output["stdout"]


async def test_shell_unknown_command_is_a_tool_error(ctx: ToolContext) -> None:
    result = await call_tool("shell", {"argv": ["no-such-command-xyz"]}, ctx)
    assert result.error_type == "tool_error"
    assert "not found" in (result.error or "")


# --- names and arguments -----------------------------------------------------------------------


def test_unknown_tool_names_known_tools_and_suggests_one() -> None:
    with pytest.raises(ToolError) as info:
        get_tool_spec("file_raed")
    message = str(info.value)
    assert "'file_raed'" in message
    assert "'shell'" in message
    assert "(did you mean 'file_read'?)" in message
    assert isinstance(info.value, ArmatureError)


async def test_call_tool_reports_unknown_tool_instead_of_raising(ctx: ToolContext) -> None:
    result = await call_tool("shel", {}, ctx)
    assert result.error_type == "unknown_tool"
    assert "did you mean 'shell'" in (result.error or "")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"argv": "rm -rf /"}, "argv"),
        ({"argv": ["ls"], "shell": True}, "shell"),
        ({}, "argv"),
        ({"argv": ["ls"], "timeout_s": -1}, "timeout_s"),
    ],
)
async def test_invalid_args_are_rejected_before_running(
    ctx: ToolContext, args: dict[str, Any], expected: str
) -> None:
    result = await call_tool("shell", args, ctx)
    assert result.error_type == "invalid_args"
    assert expected in (result.error or "")


def test_builtin_reversibility() -> None:
    assert {
        n: get_tool_spec(n).reversibility
        for n in ("file_read", "file_list", "file_write", "shell", "http_request")
    } == {
        "file_read": "full",
        "file_list": "full",
        "file_write": "partial",
        "shell": "none",
        "http_request": "none",
    }
    # An outbound request is an action, a GET too (its URL carries data out)...
    assert tool_reversibility("http_request", {"url": "http://a", "method": "GET"}) == "none"
    assert tool_reversibility("http_request", {"url": "http://a"}) == "none"
    assert tool_reversibility("shell", {"argv": ["ls"]}) == "none"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"url": "https://api.example.com/v1?q=1"}, "full"),  # GET by default
        ({"url": "https://API.example.com./v1", "method": "head"}, "full"),
        ({"url": "https://api.example.com:8443/", "method": "GET"}, "full"),  # any port
        ({"url": "https://api.example.com/", "method": "POST"}, "none"),  # not that method
        ({"url": "https://other.example.com/", "method": "GET"}, "none"),  # not that host
        ({"url": "https://x.docs.example.org/", "method": "GET"}, "full"),  # *.docs...
        ({"url": "https://docs.example.org/", "method": "GET"}, "none"),  # not the apex
        ({"url": "https://api.example.com.evil.test/", "method": "GET"}, "none"),
        ({"url": "http://[::1", "method": "GET"}, "none"),  # does not parse
        ({"method": "GET"}, "none"),
    ],
)
def test_a_request_is_fully_reversible_only_where_the_spec_marks_it_safe(
    tmp_path: Path, args: dict[str, Any], expected: str
) -> None:
    """...unless the spec marks that host and method safe (http_safe)."""
    marked = ToolContext(
        workspace=tmp_path,
        http_safe=(("api.example.com", ("GET", "HEAD")), ("*.docs.example.org", ("GET",))),
    )
    assert tool_reversibility("http_request", args, ctx=marked) == expected
    assert tool_reversibility("http_request", args, ctx=ToolContext(workspace=tmp_path)) == "none"


# --- Python function tools ---------------------------------------------------------------------


@pytest.fixture
def make_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], str]]:
    """Write a uniquely named module on sys.path; returns its name."""
    monkeypatch.syspath_prepend(str(tmp_path))
    names: list[str] = []

    def make(source: str) -> str:
        name = f"armature_test_tools_{uuid.uuid4().hex}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        names.append(name)
        return name

    yield make
    for name in names:
        sys.modules.pop(name, None)


FUNCTIONS = '''
    from __future__ import annotations

    import asyncio
    from typing import Annotated

    from pydantic import BaseModel, Field

    from armature_temporal.tools import ToolContext


    class Point(BaseModel):
        x: int
        y: int


    def add(a: int, b: Annotated[int, Field(ge=0)] = 2, *, tags: list[str] | None = None) -> int:
        """Add two numbers.

        More detail that the model does not need.

        Args:
            a: The first number.
            b: The second number,
                never negative.
            tags: Labels.
        """
        return a + b


    async def norm(p: Point, scale: float = 1.0) -> dict[str, float]:
        await asyncio.sleep(0)
        return {"norm": (p.x ** 2 + p.y ** 2) ** 0.5 * scale}


    def where(name: str, ctx: ToolContext) -> str:
        return str(ctx.workspace / name)


    async def slow() -> None:
        await asyncio.sleep(30)


    def broken(x: int) -> int:
        raise RuntimeError(f"cannot handle {x}")


    def unsafe() -> object:
        return object()
'''


async def test_function_tool_schema_comes_from_the_signature(
    make_module: Callable[[str], str], ctx: ToolContext
) -> None:
    mod = make_module(FUNCTIONS)
    spec = get_tool_spec(f"{mod}:add", registry=ToolRegistry())
    assert spec.name == f"{mod}:add"
    assert spec.description == "Add two numbers."
    assert spec.reversibility == "none"  # nobody registered it, so nothing is assumed
    params = spec.parameters
    assert params["required"] == ["a"]
    assert params["additionalProperties"] is False
    assert params["properties"]["a"]["type"] == "integer"
    assert params["properties"]["a"]["description"] == "The first number."
    assert params["properties"]["b"] == {
        "default": 2,
        "description": "The second number, never negative.",
        "minimum": 0,
        "title": "B",
        "type": "integer",
    }
    assert params["properties"]["tags"]["anyOf"][0] == {
        "items": {"type": "string"},
        "type": "array",
    }


async def test_function_tool_is_called_with_validated_args(
    make_module: Callable[[str], str], ctx: ToolContext
) -> None:
    mod = make_module(FUNCTIONS)
    registry = ToolRegistry()
    ok = await call_tool(f"{mod}:add", {"a": 40, "tags": ["x"]}, ctx, registry=registry)
    assert ok.output == {"result": 42}
    negative = await call_tool(f"{mod}:add", {"a": 1, "b": -1}, ctx, registry=registry)
    assert negative.error_type == "invalid_args"
    wrong_type = await call_tool(f"{mod}:add", {"a": "forty"}, ctx, registry=registry)
    assert wrong_type.error_type == "invalid_args"
    assert "a:" in (wrong_type.error or "")
    extra = await call_tool(f"{mod}:add", {"a": 1, "c": 2}, ctx, registry=registry)
    assert extra.error_type == "invalid_args"


async def test_async_function_tool_with_a_model_argument(
    make_module: Callable[[str], str], ctx: ToolContext
) -> None:
    mod = make_module(FUNCTIONS)
    result = await call_tool(
        f"{mod}:norm", {"p": {"x": 3, "y": 4}, "scale": 2}, ctx, registry=ToolRegistry()
    )
    assert result.output == {"norm": 10.0}


async def test_tool_context_parameter_is_injected_not_asked_for(
    make_module: Callable[[str], str], ctx: ToolContext, workspace: Path
) -> None:
    mod = make_module(FUNCTIONS)
    registry = ToolRegistry()
    assert list(get_tool_spec(f"{mod}:where", registry=registry).parameters["properties"]) == [
        "name"
    ]
    result = await call_tool(f"{mod}:where", {"name": "f"}, ctx, registry=registry)
    assert result.output == {"result": str(workspace / "f")}


async def test_function_tool_failures_are_results_not_exceptions(
    make_module: Callable[[str], str], workspace: Path
) -> None:
    mod = make_module(FUNCTIONS)
    registry = ToolRegistry()
    short = ToolContext(workspace=workspace, timeout_s=0.2)
    slow = await call_tool(f"{mod}:slow", {}, short, registry=registry)
    assert slow.error_type == "timeout"
    broken = await call_tool(f"{mod}:broken", {"x": 7}, short, registry=registry)
    assert broken.error_type == "tool_error"
    assert "RuntimeError: cannot handle 7" in (broken.error or "")
    unsafe = await call_tool(f"{mod}:unsafe", {}, short, registry=registry)
    assert unsafe.error_type == "tool_error"
    assert "not JSON-safe" in (unsafe.error or "")


def test_missing_function_suggests_the_closest(make_module: Callable[[str], str]) -> None:
    mod = make_module(FUNCTIONS)
    with pytest.raises(ToolError, match=r"has no function 'ad'.*\(did you mean 'add'\?\)"):
        get_tool_spec(f"{mod}:ad", registry=ToolRegistry())
    with pytest.raises(ToolError, match="cannot import module 'no_such_module_xyz'"):
        get_tool_spec("no_such_module_xyz:f", registry=ToolRegistry())


# --- registered tools --------------------------------------------------------------------------


async def test_registered_tool_with_a_failing_postcondition(ctx: ToolContext) -> None:
    registry = ToolRegistry()

    @register_tool(
        name="make_slug",
        reversibility="partial",
        postcondition=lambda args, out: out["slug"] == args["title"].lower().replace(" ", "-"),
        registry=registry,
    )
    def make_slug(title: str) -> dict[str, str]:
        """Turn a title into a URL slug."""
        return {"slug": title.replace(" ", "_")}  # wrong separator

    spec = get_tool_spec("make_slug", registry=registry)
    assert (spec.description, spec.reversibility) == ("Turn a title into a URL slug.", "partial")
    result = await call_tool("make_slug", {"title": "Hello World"}, ctx, registry=registry)
    assert (result.ok, result.error_type) == (False, "postcondition_failed")
    assert result.output == {"slug": "Hello_World"}
    assert "make_slug" in (result.error or "")


async def test_registered_async_tool_default_name_and_named_postcondition(ctx: ToolContext) -> None:
    registry = ToolRegistry()

    def is_positive(args: Any, out: Any) -> bool:
        return bool(out["result"] > 0)

    @register_tool(postcondition=is_positive, registry=registry)
    async def double(n: int) -> int:
        return 2 * n

    name = f"{__name__}:double"  # the default name is module:function
    assert (await call_tool(name, {"n": 2}, ctx, registry=registry)).output == {"result": 4}
    failed = await call_tool(name, {"n": -2}, ctx, registry=registry)
    assert failed.error_type == "postcondition_failed"
    assert "'is_positive'" in (failed.error or "")


def test_register_tool_refuses_builtin_names_and_taken_names() -> None:
    registry = ToolRegistry()

    def one() -> int:
        return 1

    def two() -> int:
        return 2

    with pytest.raises(ToolError, match="built-in"):
        register_tool(one, name="shell", registry=registry)
    register_tool(one, name="num", registry=registry)
    with pytest.raises(ToolError, match="already registered"):
        register_tool(two, name="num", registry=registry)
    with pytest.raises(ToolError, match="not usable"):
        register_tool(two, name="has space", registry=registry)
    with pytest.raises(ToolError, match=r"\*args or \*\*kwargs"):
        register_tool(print, name="printer", registry=registry)
    assert "num" in registry.names()


async def test_decorated_function_keeps_its_settings_under_its_module_name(
    make_module: Callable[[str], str], ctx: ToolContext
) -> None:
    mod = make_module("""
        from armature_temporal.tools import ToolRegistry, register_tool

        REGISTRY = ToolRegistry()

        @register_tool(name="short", reversibility="partial",
                       postcondition=lambda a, o: False, registry=REGISTRY)
        def tagged(x: int) -> int:
            return x
    """)
    elsewhere = ToolRegistry()
    spec = get_tool_spec(f"{mod}:tagged", registry=elsewhere)
    assert (spec.name, spec.reversibility) == (f"{mod}:tagged", "partial")
    result = await call_tool(f"{mod}:tagged", {"x": 1}, ctx, registry=elsewhere)
    assert result.error_type == "postcondition_failed"


#: What send_payment did (module level, so the tool can be reached as module:function).
PAID: list[int] = []


def send_payment(cents: int) -> dict[str, bool]:
    """Pay someone: a tool whose registration does not say it is irreversible."""
    PAID.append(cents)
    return {"sent": True}


@pytest.fixture
def fresh_default_registry(monkeypatch: pytest.MonkeyPatch) -> ToolRegistry:
    registry = ToolRegistry()
    monkeypatch.setattr(ToolRegistry, "_default", registry)
    PAID.clear()
    return registry


async def pay(**fields: Any) -> Any:
    from temporalio.testing import ActivityEnvironment

    from activities.tools import tool_call
    from armature_temporal.runtime.models import ToolCallInput

    return await ActivityEnvironment().run(
        tool_call,
        ToolCallInput(
            run_id="r1",
            stage_id="s",
            tool=f"{__name__}:send_payment",
            args={"cents": 500},
            spec_name="pay",
            **fields,
        ),
    )


async def test_a_tool_registered_without_a_reversibility_is_irreversible(
    fresh_default_registry: ToolRegistry,
) -> None:
    """Issue #14 item 9: ``register_tool`` defaulted to ``full``, so send_payment skipped the
    approval rule and ran in an unattended verification run."""
    register_tool(send_payment)
    name = f"{__name__}:send_payment"
    assert get_tool_spec(name).reversibility == "none"
    assert tool_reversibility(name, {"cents": 1}) == "none"
    ask = {
        "tool": "*",
        "condition": {"field": "_tool_reversibility", "op": "equals", "value": "none"},
        "action": "require_approval",
    }
    waiting = await pay(safety_rules=[ask])
    assert (waiting.policy_action, waiting.error) == ("require_approval", "waiting for approval")
    unattended = await pay(verification=True)
    assert unattended.error_type == "policy_blocked"
    assert "reversibility 'none'" in (unattended.error or "")
    assert PAID == []
    done = await pay(safety_rules=[ask], approved=True)  # a person approved: it runs
    assert done.ok and PAID == [500], done


async def test_a_tool_declared_fully_reversible_runs_unattended(
    fresh_default_registry: ToolRegistry,
) -> None:
    register_tool(send_payment, reversibility="full")
    done = await pay(verification=True)
    assert done.ok and PAID == [500], done


def test_builtin_tools_declare_their_reversibility_explicitly() -> None:
    from armature_temporal.tools._registry import _BUILTINS

    declared = {t.spec.name: t.spec.reversibility for t in _BUILTINS}
    assert declared == {
        "file_read": "full",
        "file_write": "partial",
        "file_list": "full",
        "shell": "none",
        "http_request": "none",
    }


# --- http_request ------------------------------------------------------------------------------


class _Handler(http.server.BaseHTTPRequestHandler):
    seen: list[str]

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def _reply(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.server.seen.append(f"GET {self.path}")  # type: ignore[attr-defined]
        port = cast(http.server.HTTPServer, self.server).server_port
        if self.path == "/hello":
            self._reply(200, b"hello there", {"Content-Type": "text/plain; charset=utf-8"})
        elif self.path == "/big":
            self._reply(200, b"y" * 50_000)
        elif self.path == "/slow":
            time.sleep(1.5)
            self._reply(200, b"late")
        elif self.path == "/redirect-in":
            self._reply(302, b"", {"Location": "/hello"})
        elif self.path == "/redirect-out":
            self._reply(302, b"", {"Location": f"http://localhost:{port}/hello"})
        else:
            self._reply(404, b"not found")

    def do_POST(self) -> None:
        self.server.seen.append(f"POST {self.path}")  # type: ignore[attr-defined]
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self._reply(
            201,
            json.dumps({"got": json.loads(body), "type": self.headers["Content-Type"]}).encode(),
        )


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[http.server.ThreadingHTTPServer]:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    httpd.seen = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def http_ctx(workspace: Path, *hosts: str, cap: int = 1000) -> ToolContext:
    return ToolContext(
        workspace=workspace, timeout_s=5, output_cap_bytes=cap, http_allow_hosts=hosts
    )


@pytest.mark.parametrize(
    ("hosts", "url"),
    [
        ((), "http://example.com/"),  # empty allow-list: nothing is allowed
        (("127.0.0.1",), "http://example.com/"),
        (("127.0.0.1",), "http://127.0.0.1@example.com/"),  # userinfo does not fool it
        (("*.example.com",), "http://example.com/"),  # a wildcard covers subdomains only
        (("example.com",), "http://example.com.evil.test/"),
    ],
)
async def test_http_request_to_a_host_not_allowed_is_refused(
    workspace: Path, hosts: tuple[str, ...], url: str
) -> None:
    result = await call_tool("http_request", {"url": url}, http_ctx(workspace, *hosts))
    assert (result.ok, result.error_type) == (False, "policy_blocked")
    assert "not allowed" in (result.error or "")


async def test_http_request_rejects_other_schemes(workspace: Path) -> None:
    result = await call_tool(
        "http_request", {"url": "file:///etc/passwd"}, http_ctx(workspace, "127.0.0.1")
    )
    assert result.error_type == "invalid_args"


async def test_http_get_on_an_allowed_host(
    workspace: Path, server: http.server.ThreadingHTTPServer
) -> None:
    port = server.server_address[1]
    result = await call_tool(
        "http_request", {"url": f"http://127.0.0.1:{port}/hello"}, http_ctx(workspace, "127.0.0.1")
    )
    assert result.ok, result.error
    assert (result.output["status_code"], result.output["body"]) == (200, "hello there")
    assert result.output["headers"]["content-type"] == "text/plain; charset=utf-8"
    assert result.output["truncated"] is False


async def test_http_post_sends_an_object_body_as_json(
    workspace: Path, server: http.server.ThreadingHTTPServer
) -> None:
    port = server.server_address[1]
    result = await call_tool(
        "http_request",
        {"url": f"http://127.0.0.1:{port}/echo", "method": "POST", "body": {"a": [1, 2]}},
        http_ctx(workspace, "127.0.0.1"),
    )
    assert result.output["status_code"] == 201
    assert json.loads(result.output["body"]) == {"got": {"a": [1, 2]}, "type": "application/json"}


async def test_http_redirects_are_followed_only_to_allowed_hosts(
    workspace: Path, server: http.server.ThreadingHTTPServer
) -> None:
    port = server.server_address[1]
    ctx = http_ctx(workspace, "127.0.0.1")
    inside = await call_tool("http_request", {"url": f"http://127.0.0.1:{port}/redirect-in"}, ctx)
    assert inside.output["url"] == f"http://127.0.0.1:{port}/hello"
    assert inside.output["body"] == "hello there"
    server.seen.clear()  # type: ignore[attr-defined]
    out = await call_tool("http_request", {"url": f"http://127.0.0.1:{port}/redirect-out"}, ctx)
    assert out.error_type == "policy_blocked"
    assert "redirect" in (out.error or "") and "'localhost'" in (out.error or "")
    assert server.seen == ["GET /redirect-out"]  # type: ignore[attr-defined]


async def test_a_request_run_as_safe_follows_no_redirect_to_a_request_not_marked_safe(
    workspace: Path, server: http.server.ThreadingHTTPServer
) -> None:
    """A GET the spec marks safe (so a verification run may make it) that redirects to an
    allowed host not marked safe is refused there: it would become an unmarked request."""
    port = server.server_address[1]
    ctx = http_ctx(workspace, "127.0.0.1", "localhost").model_copy(
        update={"http_safe": (("127.0.0.1", ("GET",)),)}
    )
    inside = await call_tool("http_request", {"url": f"http://127.0.0.1:{port}/redirect-in"}, ctx)
    assert inside.ok and inside.output["body"] == "hello there"
    server.seen.clear()  # type: ignore[attr-defined]
    out = await call_tool("http_request", {"url": f"http://127.0.0.1:{port}/redirect-out"}, ctx)
    assert (out.ok, out.error_type) == (False, "policy_blocked")
    assert "'localhost' with GET is not marked safe" in (out.error or ""), out.error
    assert server.seen == ["GET /redirect-out"]  # type: ignore[attr-defined]
    # Not run as safe (no mark), the same redirect to an allowed host is followed.
    unmarked = http_ctx(workspace, "127.0.0.1", "localhost")
    followed = await call_tool(
        "http_request", {"url": f"http://127.0.0.1:{port}/redirect-out"}, unmarked
    )
    assert followed.ok and followed.output["body"] == "hello there"


async def test_http_response_body_is_capped(
    workspace: Path, server: http.server.ThreadingHTTPServer
) -> None:
    port = server.server_address[1]
    result = await call_tool(
        "http_request",
        {"url": f"http://127.0.0.1:{port}/big"},
        http_ctx(workspace, "127.0.0.1", cap=100),
    )
    assert result.output["body"] == "y" * 100
    assert result.output["truncated"] is True


async def test_http_request_times_out(
    workspace: Path, server: http.server.ThreadingHTTPServer
) -> None:
    port = server.server_address[1]
    result = await call_tool(
        "http_request",
        {"url": f"http://127.0.0.1:{port}/slow", "timeout_s": 0.3},
        http_ctx(workspace, "127.0.0.1"),
    )
    assert result.error_type == "timeout"
