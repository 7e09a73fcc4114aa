"""The approval inbox in a real headless browser: Debian's chromium driven by selenium through
the distribution's chromedriver, against ``/ui`` of the app ``armature serve`` runs
(create_service_app, the token store's TokenAuthorizer) served by uvicorn on a free port over
a real Temporal dev server. A person logs in with a token, sees the gate and the output it
asks about,
types a comment, clicks Approve; the run completes with the decision recorded by the token's
name. And a screenshot of the inbox that is not blank."""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from armature_temporal.runtime.models import RunResult
from armature_temporal.service.api.app import create_service_app
from armature_temporal.service.api.auth import TokenAuthorizer
from armature_temporal.service.api.deps import ServiceState
from armature_temporal.spec.compiler import load_plan
from armature_temporal.store import TraceStore
from tests.fakes import SPECS, free_port, start, wait_for_gate
from tests.ui.inbox_harness import png_pixels
from worker import build_worker

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
WIDTH, HEIGHT = 1200, 900

pytestmark = [
    pytest.mark.asyncio(loop_scope="session"),
    pytest.mark.skipif(
        not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
        reason="the inbox's browser test needs Debian's chromium and chromedriver at "
        "/usr/bin/chromium and /usr/bin/chromedriver (apt-get install chromium "
        "chromium-driver)",
    ),
]


@contextlib.asynccontextmanager
async def serving(app: Any) -> AsyncIterator[str]:
    """``app`` over real HTTP on a free loopback port, in this event loop."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    task = asyncio.create_task(server.serve())
    for _ in range(200):
        if server.started:
            break
        await asyncio.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


def chromium(profile: Path) -> Any:
    pytest.importorskip("selenium", reason="selenium is in the dev extra (pip install -e .[dev])")
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = str(CHROMIUM)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # console, for get_log
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--force-device-scale-factor=1",
        f"--window-size={WIDTH},{HEIGHT}",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)


def approve_in_browser(
    base: str, token: str, run_id: str, comment: str, shot: Path, profile: Path
) -> dict[str, Any]:
    """What a person does (blocking: run in a thread so the server keeps serving)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    driver = chromium(profile)
    try:
        wait = WebDriverWait(driver, 30)
        driver.get(f"{base}/ui")
        wait.until(ec.url_contains("/ui/login"))
        driver.find_element(By.ID, "token").send_keys(token)
        driver.find_element(By.ID, "login").click()
        card_at = (By.CSS_SELECTOR, f'section.gate[data-run="{run_id}"]')
        for _ in range(100):  # the listing of waiting runs is eventually consistent
            if driver.find_elements(*card_at):
                break
            driver.refresh()
        card = wait.until(ec.presence_of_element_located(card_at))
        seen = {"card": card.text, "who": driver.find_element(By.ID, "who").text}
        driver.save_screenshot(str(shot))
        seen["viewport"] = driver.get_window_size()
        card.find_element(By.TAG_NAME, "textarea").send_keys(comment)
        card.find_element(By.CSS_SELECTOR, "button.approve").click()
        seen["done"] = wait.until(ec.presence_of_element_located((By.ID, "done"))).text
        return seen
    finally:
        driver.quit()


async def test_a_person_approves_a_gate_in_the_browser_and_the_run_records_who(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SE_OFFLINE", "true")  # selenium-manager must not look anything up
    plan = load_plan(SPECS / "customer-triage.yaml")
    # The app `armature serve` runs, with the real token store behind it.
    store = TraceStore(f"sqlite:///{tmp_path / 'tokens.db'}")
    token = store.create_token("dana", ["read", "approve"])

    async def connected() -> Client:
        return client

    app = create_service_app(
        ServiceState(
            plans={plan.name: plan},
            client=connected,
            task_queue=task_queue,
            auth=TokenAuthorizer(store, loopback=True),
        )
    )
    shot = tmp_path / "inbox.png"
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue)
        status = await wait_for_gate(handle, "approve_reply")
        async with serving(app) as base:
            seen = await asyncio.to_thread(
                approve_in_browser,
                base,
                token,
                handle.id,
                "ship it, says the browser",
                shot,
                tmp_path / "profile",
            )
        result: RunResult = await asyncio.wait_for(handle.result(), timeout=60)
    store.close()

    assert seen["who"] == "dana"
    assert "approve_reply" in seen["card"] and "output of draft_reply" in seen["card"]
    draft = status.stages["draft_reply"].output
    assert json.dumps(draft["content"])[1:40] in seen["card"]  # the upstream output
    assert seen["done"] == f"{handle.id} approve_reply: approved"
    assert result.state == "completed"
    gate = result.stages["approve_reply"].gate
    assert gate is not None
    assert (gate.decision, gate.by, gate.comment) == (
        "approve",
        "dana",
        "ship it, says the browser",
    )

    # The screenshot: the whole viewport, and a page (not a blank one).
    width, height, channels, pixels = png_pixels(shot.read_bytes())
    assert width == WIDTH and height <= HEIGHT and height > HEIGHT // 2, (width, height)
    step = max(1, len(pixels) // 200_000 // channels) * channels
    lumas = [sum(pixels[i : i + 3]) / 3 for i in range(0, len(pixels) - channels, step)]
    assert statistics.pvariance(lumas) > 100, "the inbox screenshot is (nearly) one colour"
    assert len({round(v) for v in lumas}) > 20
