"""Load a static HTML page in headless Chromium (the inbox test's driver), as a person opens a
file: no console errors, something drawn, and a screenshot that is not blank."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.ui.inbox_harness import png_pixels
from tests.ui.test_inbox_browser import CHROMEDRIVER, CHROMIUM, chromium

#: A page whose commonest colour covers more than this share of the pixels is blank.
BLANK_SHARE = 0.99


def load_and_screenshot(page: Path, shot: Path, profile: Path) -> dict[str, int]:
    """Open ``page`` (a file), assert the console logged no error and the screenshot is not
    blank; returns the counts of SVG charts and distinct colours seen."""
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.skip(
            "the HTML pages' browser test needs Debian's chromium and chromedriver at "
            f"{CHROMIUM} and {CHROMEDRIVER} (apt-get install chromium chromium-driver)"
        )
    driver = chromium(profile)
    try:
        driver.get(page.resolve().as_uri())
        charts = int(driver.execute_script("return document.querySelectorAll('svg').length"))
        scripts = driver.execute_script("return [...document.scripts].map(s => s.type)")
        height = int(driver.execute_script("return document.documentElement.scrollHeight"))
        driver.set_window_size(1200, min(max(height, 600), 8000))
        shot.parent.mkdir(parents=True, exist_ok=True)
        assert driver.save_screenshot(str(shot)), f"no screenshot of {page}"
        errors = [e for e in driver.get_log("browser") if e.get("level") in ("SEVERE", "ERROR")]
    finally:
        driver.quit()
    assert errors == [], f"console errors on {page}: {errors}"
    # The only scripts are the charts' JSON data blocks: nothing on the page runs.
    assert set(scripts) <= {"application/json"}, scripts
    _, _, channels, samples = png_pixels(shot.read_bytes())
    pixels = Counter(
        samples[i : i + 3]
        for i in range(0, len(samples), channels * 7)  # every 7th pixel
    )
    total = sum(pixels.values())
    commonest = pixels.most_common(1)[0][1]
    assert commonest / total < BLANK_SHARE, f"{shot} is blank: {commonest / total:.1%} one colour"
    assert len(pixels) > 20, f"{shot} has only {len(pixels)} colours"
    return {"svg": charts, "colours": len(pixels)}
