"""Screenshot a quickstart run's page in the Temporal Web UI, and check it names every stage.

Usage::

    python tests/ui/webui_screenshot.py OUT.png [--dom OUT.html]

What it does, as a user would, in a throwaway ARMATURE_HOME (never ~/.armature) with the
embedded dev server on free ports (never 7233/8233, via ARMATURE_DEV_PORT / ARMATURE_UI_PORT):

1. ``armature submit specs/quickstart.yaml --wait --json``: starts the local Temporal dev server
   and a worker in the background and runs the quickstart to completion.
2. Opens the run's Event History in headless Chromium, filtered to activity events in
   ascending order::

       http://localhost:<ui_port>/namespaces/default/workflows/<run_id>/<temporal_run_id>/history?category=activity&sort=ascending

   Each stage is one ``llm_call`` activity whose summary starts with the stage id
   (``outline: Outliner (worker, tier small, attempt 1)``), so the page lists, per stage, an
   "Activity Task Scheduled" row with "Activity Type llm_call" and "Summary <stage>: ...".
   (``.../timeline`` shows the same activities as labelled bars.)
3. Saves a PNG screenshot and the rendered DOM (``--dump-dom``), and checks the DOM for the
   activity type ``llm_call`` with a summary for every stage of the run.
4. Always runs ``armature dev stop`` at the end.

Exits 0 when every stage was found, 1 when some were not, 2 when it could not run (no
Chromium, the run failed). Needs a ``chromium`` binary (Debian: ``apt-get install chromium``;
``$ARMATURE_CHROMIUM`` overrides) and no network: the Web UI is served by the dev server.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "specs" / "quickstart.yaml"
ACTIVITY_TYPE = "llm_call"
# The Web UI view that lists every stage: Event History, activity events only, oldest first.
VIEW_QUERY = "?category=activity&sort=ascending"
WIDTH = 1600
# The page grows with the event list: about 870 px of header, input/result panes and table
# chrome, plus about 32 px per event row. The screenshot is sized to show every row.
MIN_HEIGHT, BASE_HEIGHT, ROW_HEIGHT, MAX_HEIGHT = 1000, 900, 34, 6000
RESERVED_PORTS = {7233, 8233}

# Flags without which headless Chromium shows a blank page or tries to reach the network.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--virtual-time-budget=15000",  # lets the JS app fetch the history and render it
]


class SetupError(RuntimeError):
    """The check could not run (no Chromium, the run did not complete, ...)."""


@dataclass
class Result:
    url: str
    screenshot: str
    dom: str | None
    run_id: str
    stages: list[str]
    event_rows: int
    activity_type_found: bool
    summaries: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.activity_type_found and not self.missing


def find_chromium() -> str | None:
    """The Chromium binary: ``$ARMATURE_CHROMIUM``, else ``chromium`` / ``chromium-browser``."""
    override = os.environ.get("ARMATURE_CHROMIUM")
    if override:
        return shutil.which(override)
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


def free_port() -> int:
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in RESERVED_PORTS:
            return port


def armature_cmd() -> list[str]:
    """The ``armature`` console script next to this Python, else ``python -m cli``."""
    script = Path(sys.executable).parent / "armature"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "cli"]


def stack_env(home: Path, dev_port: int, ui_port: int) -> dict[str, str]:
    env = dict(os.environ)
    # Use the embedded stack, on our ports, with the default namespace and the UI link it serves.
    for name in ("TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "ARMATURE_UI_URL", "ARMATURE_WORKSPACE"):
        env.pop(name, None)
    env.update(
        ARMATURE_HOME=str(home),
        ARMATURE_DEV_PORT=str(dev_port),
        ARMATURE_UI_PORT=str(ui_port),
        LITELLM_LOCAL_MODEL_COST_MAP="True",
    )
    return env


def run_url(ui_port: int, run_id: str, temporal_run_id: str) -> str:
    return (
        f"http://localhost:{ui_port}/namespaces/default/workflows/"
        f"{quote(run_id, safe='')}/{temporal_run_id}/history{VIEW_QUERY}"
    )


def window_height(event_rows: int) -> int:
    return max(MIN_HEIGHT, min(MAX_HEIGHT, BASE_HEIGHT + ROW_HEIGHT * event_rows))


def count_event_rows(dom: str) -> int:
    """How many event rows the rendered history shows (each links to .../history/events/N)."""
    return len(set(re.findall(r'/history/events/(\d+)"', dom)))


def _run_chromium(
    chromium: str, args: list[str], timeout_s: float, height: int = MIN_HEIGHT
) -> str:
    """Run headless Chromium with a fresh profile; returns its stdout. Kills it all on timeout."""
    profile = tempfile.mkdtemp(prefix="armature-chromium-")
    cmd = [
        chromium,
        *CHROMIUM_FLAGS,
        f"--window-size={WIDTH},{height}",
        f"--user-data-dir={profile}",
        *args,
    ]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        text=True,
    )
    try:
        out, errout = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise SetupError(f"chromium did not finish within {timeout_s:g}s: {cmd}") from exc
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    if proc.returncode != 0:
        raise SetupError(f"chromium exited {proc.returncode}: {errout[-2000:]}")
    return out


def _wait_http(url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError as exc:
            last = exc
        time.sleep(0.2)
    raise SetupError(f"the Web UI at {url} did not answer within {timeout_s:g}s ({last})")


def find_stage_summaries(dom: str, activity_type: str = ACTIVITY_TYPE) -> dict[str, str]:
    """Stage id -> summary, for every event row of ``activity_type`` in the rendered DOM.

    An Activity Task Scheduled row reads, once tags are stripped,
    ``Activity Type llm_call Summary outline: Outliner (worker, tier small, attempt 1)``.
    """
    text = " ".join(re.sub(r"<[^>]+>", " ", dom).split())
    pattern = re.compile(
        rf"{re.escape(activity_type)} Summary ([A-Za-z0-9_][A-Za-z0-9_-]*): ([^()]*\([^()]*\)|\S+)"
    )
    found: dict[str, str] = {}
    for match in pattern.finditer(text):
        found.setdefault(match.group(1), f"{match.group(1)}: {match.group(2)}")
    return found


def main(
    out_png: Path,
    dom_path: Path | None = None,
    home: Path | None = None,
    chromium: str | None = None,
) -> Result:
    """Run the quickstart, screenshot its Web UI page to ``out_png``, check the DOM.

    Raises:
        SetupError: No Chromium, or the run or the Web UI did not come up.
    """
    chromium = chromium or find_chromium()
    if chromium is None:
        raise SetupError("no chromium binary on PATH (Debian: apt-get install chromium)")
    out_png = out_png.resolve()
    out_png.parent.mkdir(parents=True, exist_ok=True)
    seconds: dict[str, float] = {}
    with contextlib.ExitStack() as stack:
        if home is None:
            home = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="armature-ui-")))
        dev_port, ui_port = free_port(), free_port()
        while ui_port == dev_port:
            ui_port = free_port()
        env = stack_env(home, dev_port, ui_port)
        try:
            t0 = time.monotonic()
            proc = subprocess.run(
                [*armature_cmd(), "submit", str(SPEC), "--wait", "--json"],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            seconds["submit"] = round(time.monotonic() - t0, 2)
            if proc.returncode != 0:
                raise SetupError(
                    f"armature submit exited {proc.returncode}\nstdout: {proc.stdout[-2000:]}\n"
                    f"stderr: {proc.stderr[-2000:]}\n(logs under {home / 'logs'})"
                )
            view = json.loads(proc.stdout)
            stages = list(view["stages"])
            url = run_url(ui_port, view["run_id"], view["temporal_run_id"])

            _wait_http(f"http://localhost:{ui_port}/", timeout_s=20)
            # The DOM first: its event rows size the screenshot so that every row shows.
            t0 = time.monotonic()
            dom = _run_chromium(chromium, ["--dump-dom", url], timeout_s=45)
            seconds["dump_dom"] = round(time.monotonic() - t0, 2)
            if dom_path is not None:
                dom_path.parent.mkdir(parents=True, exist_ok=True)
                dom_path.write_text(dom, encoding="utf-8")
            rows = count_event_rows(dom)

            t0 = time.monotonic()
            out_png.unlink(missing_ok=True)
            _run_chromium(
                chromium,
                [f"--screenshot={out_png}", url],
                timeout_s=45,
                height=window_height(rows),
            )
            seconds["screenshot"] = round(time.monotonic() - t0, 2)
            if not out_png.is_file() or out_png.stat().st_size == 0:
                raise SetupError(f"chromium wrote no screenshot to {out_png}")
        finally:
            t0 = time.monotonic()
            subprocess.run(
                [*armature_cmd(), "dev", "stop"],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=30,
            )
            seconds["dev_stop"] = round(time.monotonic() - t0, 2)

    summaries = find_stage_summaries(dom)
    return Result(
        url=url,
        screenshot=str(out_png),
        dom=str(dom_path) if dom_path else None,
        run_id=view["run_id"],
        stages=stages,
        event_rows=rows,
        activity_type_found=ACTIVITY_TYPE in dom,
        summaries={sid: summaries[sid] for sid in stages if sid in summaries},
        missing=[sid for sid in stages if sid not in summaries],
        seconds=seconds,
    )


def _cli(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="where to write the PNG screenshot")
    parser.add_argument("--dom", type=Path, help="also save the rendered DOM here")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        result = main(args.out, args.dom)
    except SetupError as exc:
        print(f"could not run: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({**asdict(result), "ok": result.ok}, indent=2))
    print(f"Web UI page: {result.url}", file=sys.stderr)
    print(
        f"activity type {ACTIVITY_TYPE!r}: {'found' if result.activity_type_found else 'MISSING'}",
        file=sys.stderr,
    )
    for sid in result.stages:
        print(f"  {sid}: {result.summaries.get(sid, 'MISSING')}", file=sys.stderr)
    print(f"screenshot: {result.screenshot} ({time.monotonic() - started:.1f}s)", file=sys.stderr)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(_cli())
