"""The Temporal Web UI shows each stage of a run as a named activity (headless Chromium).

Runs ``tests/ui/webui_screenshot.py``: the quickstart on the embedded dev server (free ports, a
temporary ARMATURE_HOME), then the run's Event History page rendered by headless Chromium. Skips
when no ``chromium`` binary is installed (Debian: ``apt-get install chromium``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ui.webui_screenshot import ACTIVITY_TYPE, find_chromium, main

QUICKSTART_STAGES = ["outline", "draft", "review"]

pytestmark = pytest.mark.skipif(
    find_chromium() is None,
    reason="no chromium binary on PATH (Debian: apt-get install chromium; or set "
    "$ARMATURE_CHROMIUM): the Web UI check needs a headless browser",
)


@pytest.mark.timeout(60)
def test_web_ui_run_page_names_every_stage_as_an_llm_call_activity(tmp_path: Path) -> None:
    dom_path = tmp_path / "run.html"
    result = main(tmp_path / "run.png", dom_path, home=tmp_path / "armature-home")

    assert "/history?" in result.url
    assert Path(result.screenshot).stat().st_size > 10_000  # a rendered page, not a blank one
    dom = dom_path.read_text(encoding="utf-8")
    assert ACTIVITY_TYPE in dom
    assert result.stages == QUICKSTART_STAGES
    assert result.missing == [], f"stages without an {ACTIVITY_TYPE} row: {result.missing}"
    for sid in QUICKSTART_STAGES:
        assert result.summaries[sid].startswith(f"{sid}: "), result.summaries
        assert result.summaries[sid] in dom
