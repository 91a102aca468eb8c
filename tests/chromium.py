"""Headless Chromium for the browser tests (Debian's chromium and chromium-driver)."""

from __future__ import annotations

import shutil
from pathlib import Path

FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",  # nothing may reach the network from the tests
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)


def chromium():  # type: ignore[no-untyped-def]
    """A selenium Chrome driver on the system's chromium, with the browser console logged; a
    missing browser is a failure (``.ci/run`` installs it), never a skip."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary = shutil.which("chromium") or "/usr/bin/chromium"
    driver_path = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    assert Path(binary).exists() and Path(driver_path).exists(), (
        "the browser tests need Debian's chromium and chromium-driver "
        "(apt-get install chromium chromium-driver; .ci/run installs them)"
    )
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in FLAGS:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
