"""A real headless Chromium (Debian's, with its driver) for the HTML views' tests, driven by selenium."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars"]


def _missing() -> str | None:
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        return "no chromium here (make browser installs it)"
    if not shutil.which("chromedriver"):
        return "no chromedriver here (make browser installs it)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (the test extra has it)"
    return None


def needs_browser() -> pytest.MarkDecorator:
    """Skip where no browser can run, except in CI, where its absence is a failure."""
    reason = _missing()
    return pytest.mark.skipif(reason is not None and not os.environ.get("CI"), reason=reason or "")


@contextmanager
def chrome(width: int = 1400, height: int = 1000, dark: bool = False) -> Iterator[Any]:
    """A fresh headless Chromium (its own profile), closed after use."""
    assert _missing() is None, _missing()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or shutil.which("chromium-browser")
    with tempfile.TemporaryDirectory(prefix="jaxside-chromium-") as profile:
        for flag in [*FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}"]:
            options.add_argument(flag)
        driver = webdriver.Chrome(options=options, service=Service(shutil.which("chromedriver")))
        try:
            if dark:
                driver.execute_cdp_cmd("Emulation.setEmulatedMedia",
                                       {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
            yield driver
        finally:
            driver.quit()


def in_view(driver: Any, element: Any) -> bool:
    """Whether the element is displayed and its box lies within the window."""
    return driver.execute_script(
        "const r = arguments[0].getBoundingClientRect();"
        "return r.height > 0 && r.top >= 0 && r.bottom <= innerHeight;", element)
