"""Launching the system Chromium through Playwright, the way this machine allows.

``playwright install`` downloads its own browser, which cannot work offline; clawgym drives
Debian's ``chromium`` instead. The flags keep it from reaching for the network at start
(those connections are refused here, many at a time) and let it run as root, headless.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

CHROMIUM_ARGS = (
    "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-quic", "--no-first-run",
)


def chromium_path() -> str | None:
    """The Chromium binary: ``$CLAWGYM_CHROMIUM``, else ``chromium`` on PATH."""
    return os.environ.get("CLAWGYM_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


def browser_unavailable_reason() -> str | None:
    """None when Playwright can drive Chromium here, else what to install."""
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "playwright is not installed: pip install 'clawgym[gui]'"
    if chromium_path() is None:
        return "chromium is not installed: apt-get install chromium (as root), or set CLAWGYM_CHROMIUM"
    return None


def launch_chromium(playwright: Any, **options: Any) -> Any:
    """A headless Chromium ``Browser`` from a started ``sync_playwright()`` object."""
    path = chromium_path()
    if path is None:
        raise RuntimeError(browser_unavailable_reason())
    return playwright.chromium.launch(executable_path=path, headless=True,
                                      args=list(CHROMIUM_ARGS), **options)
