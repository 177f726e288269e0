"""Playwright driving Debian's Chromium (/usr/bin/chromium), headless, against real processes.

No browser is downloaded: Playwright's own bundled browsers do not install on this machine, so
``chromium`` launches the system binary with the flags that keep it quiet on a closed network,
in a fresh profile directory per test. Without playwright or chromium the tests skip locally
and fail in CI (scripts/test installs both).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))  # harness, webstack

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
ARTIFACTS = ROOT / "test-artifacts"


def _missing(what: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what} (scripts/test installs it)")
    pytest.skip(what)


@pytest.fixture
def browser_context(tmp_path: Path) -> Iterator[Any]:
    """A Chromium context with a fresh --user-data-dir; closed (and the browser with it) after."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("the playwright package is not installed (dev extra)")
    if not os.access(CHROMIUM, os.X_OK):
        _missing(f"{CHROMIUM} is missing (apt-get install chromium)")
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_FLAGS,
            viewport={"width": 1280, "height": 900},
            timeout=60_000,
        )
        context.set_default_timeout(20_000)
        try:
            yield context
        finally:
            context.close()


@pytest.fixture
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
