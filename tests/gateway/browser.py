"""Debian's headless Chromium driven by Selenium through chromium-driver.

Selenium rather than Playwright: both browser and driver come from apt, matched
in version by Debian, and Selenium talks to that driver directly — no second
driver process to download or keep in step with the browser.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Callable, Iterator
from typing import Any

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.service import Service

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


@contextlib.contextmanager
def chromium(width: int = 1100, height: int = 900) -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={width},{height}",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def page_state(driver: webdriver.Chrome) -> dict[str, Any]:
    """What the page publishes for tests and people (``window.trialog``)."""
    return driver.execute_script("return window.trialog || {}") or {}


def until(predicate: Callable[[], Any], timeout: float = 30, what: str = "condition") -> Any:
    """Poll a (blocking) predicate; elements re-rendered meanwhile are retried."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
            if value:
                return value
        except (StaleElementReferenceException, WebDriverException):
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)
