"""Headless Chromium for the console's browser tests: Debian's /usr/bin/chromium driven by
Playwright (its own browser download is not used). Absent, the tests skip with the reason,
unless SECRETARY_REQUIRE_BROWSER=1 (CI), where they fail.

Screenshots go to SECRETARY_SCREENSHOTS, or tests/.screenshots (ignored by git);
SECRETARY_CHROMIUM names another Chromium binary.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path(os.environ.get("SECRETARY_CHROMIUM", "/usr/bin/chromium"))
SCREENSHOTS = Path(
    os.environ.get("SECRETARY_SCREENSHOTS", Path(__file__).resolve().parents[1] / ".screenshots")
)
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}
# As the machine's probe starts it: no sandbox as root, and no calls home on a closed network.
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _unavailable(reason: str) -> None:
    if os.environ.get("SECRETARY_REQUIRE_BROWSER", "") == "1":
        pytest.fail(f"{reason} (SECRETARY_REQUIRE_BROWSER=1)")
    pytest.skip(reason)


@contextmanager
def chromium() -> Iterator[Any]:
    """Yield a launched headless Chromium (a Playwright Browser); skip if there is none."""
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError:
        _unavailable("playwright is not installed (pip install -e '.[test]')")
    if not CHROMIUM.exists():
        _unavailable(f"no Chromium at {CHROMIUM} (apt-get install -y chromium)")
    with sync_playwright() as playwright:
        try:
            browser = playwright.chromium.launch(
                executable_path=str(CHROMIUM), headless=True, args=ARGS
            )
        except Error as exc:
            _unavailable(f"Chromium at {CHROMIUM} did not start: {exc}")
        try:
            yield browser
        finally:
            browser.close()


def screenshot(page: Any, name: str) -> None:
    """Save the page at desktop and at phone width as NAME-desktop.png and NAME-phone.png."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for label, size in (("desktop", DESKTOP), ("phone", PHONE)):
        page.set_viewport_size(size)
        path = SCREENSHOTS / f"{name}-{label}.png"
        page.screenshot(path=str(path), full_page=True)
        assert path.stat().st_size > 0, path
    page.set_viewport_size(DESKTOP)
