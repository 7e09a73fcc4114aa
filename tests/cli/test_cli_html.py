"""`armature dashboard SPEC --html` and `armature report RUN --html` as a user runs them (the
console script in a subprocess) over a store that real runs of a simulate spec on a real
Temporal dev server wrote: each chart's data equals the store's, the page fetches nothing,
loads in headless Chromium without console errors, and bad input says what to do."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from temporalio.testing import WorkflowEnvironment

from armature_temporal.improve.models import AppliedChange
from armature_temporal.service.client import start_run
from armature_temporal.spec.compiler import compile_spec
from armature_temporal.spec.loader import load_spec_text
from armature_temporal.store import TraceStore
from tests.fakes import run_armature
from worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")

# Version 1 writes with a weak model only; version 2 (an "applied improvement") gives the
# draft two bandit arms. Both judge the draft after a second, independent stage.
SPEC = """\
name: pictured
version: "{version}"
inputs: [topic]
model_tiers:
  weak: {{provider: simulate, quality: 0.3}}
  strong: {{provider: simulate, quality: 0.85}}
stages:
  - id: draft
    role: {{name: Writer, model_tier: weak, description: "Write about {{{{ topic }}}}."}}
{arms}
  - id: facts
    role: {{name: Checker, model_tier: weak, description: "Facts about {{{{ topic }}}}."}}
  - id: review
    depends_on: [draft, facts]
    role:
      name: Editor
      type: judge
      model_tier: strong
      description: "Score this draft: {{{{ draft }}}}"
"""
ARMS = """\
    arms:
      - {arm_id: cheap, model_tier: weak}
      - {arm_id: good, model_tier: strong}"""
TOPICS = {"1": ["reefs", "tides", "kelp"], "2": ["gulls", "dunes", "storms", "krill"]}


def spec_text(version: str) -> str:
    return SPEC.format(version=version, arms=ARMS if version == "2" else "")


@dataclass
class Pictured:
    home: Path
    runs: dict[str, list[str]]  # version -> run ids, in start order
    spec_files: dict[str, Path]


async def cli(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {"ARMATURE_HOME": str(home), "ARMATURE_DB_URL": ""}
    result: subprocess.CompletedProcess[str] = await run_armature(*args, env=env, timeout=90)
    return result


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def pictured(
    temporal_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Pictured]:
    """Seven finished runs: three of version 1, then version 2 applied, then four of it."""
    home = tmp_path_factory.mktemp("html-home")
    files = {}
    for v in TOPICS:
        files[v] = home.parent / f"pictured-v{v}.yaml"
        files[v].write_text(spec_text(v))
    plans = {v: compile_spec(load_spec_text(spec_text(v))) for v in TOPICS}
    saved = os.environ.get("ARMATURE_HOME")
    os.environ["ARMATURE_HOME"] = str(home)  # where the in-process worker writes traces
    runs: dict[str, list[str]] = {}
    try:
        async with build_worker(temporal_env.client, "tq-html-cli"):
            for v, topics in TOPICS.items():
                runs[v] = []
                for topic in topics:  # one at a time: start order is run order
                    handle = await start_run(
                        temporal_env.client, plans[v], {"topic": topic}, task_queue="tq-html-cli"
                    )
                    await handle.result()
                    runs[v].append(handle.id)
                if v == "1":  # what `armature proposals apply` records
                    TraceStore().record_applied(
                        AppliedChange(
                            proposal_id="prop-arms",
                            spec_name="pictured",
                            spec_hash=plans["2"].spec_hash,
                            base_spec_hash=plans["1"].spec_hash,
                            applied_at="2030-01-01T00:00:00+00:00",
                            path=str(files["2"]),
                        )
                    )
    finally:
        if saved is None:
            os.environ.pop("ARMATURE_HOME", None)
        else:
            os.environ["ARMATURE_HOME"] = saved
    yield Pictured(home, runs, files)


def blocks(html: str) -> dict[str, Any]:
    """Every ``<script type="application/json" id=...>`` block of a page, parsed."""
    found = re.findall(r'<script type="application/json" id="([^"]+)">(.*?)</script>', html, re.S)
    return {name: json.loads(text) for name, text in found}


def external_refs(html: str) -> list[str]:
    """src/href values (and CSS url()/@import) that point off the page."""
    refs = re.findall(r"""(?:src|href|xlink:href)\s*=\s*["']?([^"' >]+)""", html, re.I)
    refs += re.findall(r"url\(\s*['\"]?([^)'\"]+)", html) + re.findall(r"@import", html)
    return [r for r in refs if re.match(r"(?i)(https?:)?//|@import|[a-z]+:", r)]


def store_of(p: Pictured) -> TraceStore:
    return TraceStore(f"sqlite:///{p.home / 'armature.db'}")


async def test_dashboard_html_charts_hold_what_the_store_holds(
    pictured: Pictured, tmp_path: Path
) -> None:
    page = tmp_path / "board.html"
    done = await cli("dashboard", "pictured", "--html", str(page), home=pictured.home)
    assert done.returncode == 0, done.stderr
    assert str(page) in done.stderr
    html = page.read_text()
    data = blocks(html)
    store = store_of(pictured)
    rows = sorted(store.runs(spec="pictured", limit=100), key=lambda r: r.started_at)
    ordered = pictured.runs["1"] + pictured.runs["2"]
    assert [r.run_id for r in rows] == ordered
    assert data["chart-hqs"] == [{"run_id": r.run_id, "hqs": r.hqs} for r in rows]
    assert all(r.hqs is not None for r in rows)
    assert [c["run_id"] for c in data["chart-cost"]] == ordered
    for shown, row in zip(data["chart-cost"], rows, strict=True):
        assert shown["cost_usd"] == pytest.approx(row.cost_usd)
    assert data["chart-latency"] == [{"run_id": r.run_id, "latency_ms": r.latency_ms} for r in rows]
    # Bandit arms: per window, how often each arm was chosen, as the stage records say.
    chosen = Counter(
        rec.arm_id
        for run_id in pictured.runs["2"]
        for rec in store.records(run_id)
        if rec.kind == "stage" and rec.stage_id == "draft"
    )
    shown_arms: Counter[str] = Counter()
    for window in data["chart-arms"]:
        assert window["stage_id"] == "draft"
        shown_arms.update(window["counts"])
    assert shown_arms == chosen and sum(chosen.values()) == 4
    # The applied change is marked where version 2's first run is, with the HQS either side.
    (applied,) = data["chart-improve"]["applied"]
    assert applied["proposal_id"] == "prop-arms"
    assert applied["first_run_id"] == pictured.runs["2"][0]
    v1 = [r.hqs for r in rows[:3] if r.hqs is not None]
    assert applied["hqs_before"] == pytest.approx(sum(v1) / len(v1), abs=1e-4)
    assert "applied prop-arms" in html
    assert [v["runs"] for v in data["chart-improve"]["versions"]] == [3, 4]
    # The same series as --json prints.
    as_json = await cli("dashboard", "pictured", "--json", home=pictured.home)
    history = json.loads(as_json.stdout)["history"]
    assert [p["hqs"] for p in history["runs"]] == [c["hqs"] for c in data["chart-hqs"]]
    assert external_refs(html) == []


async def test_report_html_draws_the_timeline_and_dag_the_store_and_plan_hold(
    pictured: Pictured, tmp_path: Path
) -> None:
    run_id = pictured.runs["2"][1]
    page = tmp_path / "run.html"
    done = await cli(
        "report", run_id, "--html", str(page), "--spec", str(pictured.spec_files["2"]),
        home=pictured.home,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    html = page.read_text()
    data = blocks(html)
    records = store_of(pictured).records(run_id)
    ends = {r.stage_id: r.recorded_at for r in records if r.kind == "stage"}
    spans = {s["stage_id"]: s for s in data["chart-timeline"]}
    assert {k: s["end"] for k, s in spans.items()} == ends
    # The review starts when the later of its dependencies ended.
    assert spans["review"]["start"] == max(ends["draft"], ends["facts"], key=lambda t: t)
    assert spans["review"]["start_from"] == "dependencies"
    attempts = [r for r in records if r.kind == "attempt" and r.stage_id == "draft"]
    assert [a["seq"] for a in spans["draft"]["attempts"]] == [r.seq for r in attempts]
    levels = {n["stage_id"]: (n["level"], n["depends_on"]) for n in data["chart-dag"]}
    assert levels == {"draft": (0, []), "facts": (0, []), "review": (1, ["draft", "facts"])}
    assert "<svg" in html and external_refs(html) == []
    # Without --spec: the same DAG and starts, from the stages the run's start record names.
    done = await cli("report", run_id, "--html", str(page), home=pictured.home)
    assert done.returncode == 0, done.stderr
    alone = blocks(page.read_text())
    assert {n["stage_id"]: (n["level"], n["depends_on"]) for n in alone["chart-dag"]} == levels
    assert alone["chart-timeline"] == data["chart-timeline"]
    assert "--spec SPEC_FILE" not in page.read_text()


async def test_html_bad_input_names_the_thing_and_the_fix(
    pictured: Pictured, tmp_path: Path
) -> None:
    missing = tmp_path / "no" / "such" / "board.html"
    done = await cli("dashboard", "pictured", "--html", str(missing), home=pictured.home)
    assert done.returncode == 2
    assert str(missing.parent) in done.stderr and "mkdir -p" in done.stderr
    assert not missing.parent.exists()
    done = await cli(
        "dashboard", "pictureed", "--html", str(tmp_path / "x.html"), home=pictured.home
    )
    assert done.returncode == 2
    assert "'pictureed'" in done.stderr and "pictured" in done.stderr
    assert not (tmp_path / "x.html").exists()
    done = await cli(
        "report", "pictured-nope", "--html", str(tmp_path / "x.html"), home=pictured.home
    )
    assert done.returncode == 2
    assert "'pictured-nope'" in done.stderr and "armature runs list" in done.stderr
    done = await cli(
        "report", pictured.runs["1"][0], "--html", str(tmp_path / "x.html"),
        "--spec", str(pictured.spec_files["2"]), home=pictured.home,
    )  # fmt: skip
    assert done.returncode == 2
    assert "spec_hash" in done.stderr and "--spec" in done.stderr
    # A spec file with no runs yet: a page that says so, not empty axes.
    fresh = tmp_path / "fresh.yaml"
    fresh.write_text(spec_text("1").replace("name: pictured", "name: unrun"))
    page = tmp_path / "unrun.html"
    done = await cli("dashboard", str(fresh), "--html", str(page), home=pictured.home)
    assert done.returncode == 0, done.stderr
    html = page.read_text()
    assert "No runs of unrun" in html and "<svg" not in html


async def test_html_pages_render_in_headless_chromium(pictured: Pictured, tmp_path: Path) -> None:
    from tests.ui.browser_pages import load_and_screenshot

    board, run = tmp_path / "board.html", tmp_path / "run.html"
    home = pictured.home
    assert (await cli("dashboard", "pictured", "--html", str(board), home=home)).returncode == 0
    spec = str(pictured.spec_files["2"])
    done = await cli("report", pictured.runs["2"][0], "--html", str(run), "--spec", spec, home=home)
    assert done.returncode == 0
    shots = Path(os.environ.get("ARMATURE_HTML_SHOTS", tmp_path))
    for page in (board, run):
        load_and_screenshot(page, shots / f"{page.stem}.png", tmp_path / f"profile-{page.stem}")
