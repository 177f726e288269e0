"""Playwright driving Debian's Chromium (/usr/bin/chromium), headless, against real processes.

No browser is downloaded: Playwright's own bundled browsers do not install on this machine, so
``chromium`` launches the system binary with the flags that keep it quiet on a closed network,
in a fresh profile directory per test. Without playwright or chromium the tests skip locally
and fail in CI (scripts/test installs both).

Screenshots go to ``test-artifacts/`` at the repository root (git ignores it; CI keeps it):
each test's own, and, when a test fails, every page it had open at that moment
(``<test>-failed-<n>.png``), so a failure in CI shows what the browser saw.
"""

from __future__ import annotations

import os
import re
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


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Keep each phase's report on the test, so the browser fixture knows it failed."""
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


def _failed_screenshots(request: pytest.FixtureRequest, context: Any) -> None:
    report = getattr(request.node, "report_call", None)
    if report is None or not report.failed:
        return
    ARTIFACTS.mkdir(exist_ok=True)
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)[:120]
    for n, page in enumerate(context.pages):
        try:
            page.screenshot(path=str(ARTIFACTS / f"{name}-failed-{n}.png"), full_page=True)
        except Exception as err:  # a crashed page: the test's own error is the one to show
            print(f"no screenshot of page {n} ({page.url}): {err}", file=sys.stderr)


@pytest.fixture
def browser_context(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A Chromium context with a fresh --user-data-dir; closed (and the browser with it) after
    (when the test failed, a screenshot of each page it had open first)."""
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
            _failed_screenshots(request, context)
        finally:
            context.close()


@pytest.fixture
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
