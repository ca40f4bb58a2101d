"""A real headless browser for the HTML tests: Debian's chromium (``.ci/run`` installs it), skipped without."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

__all__ = ["browser", "chromium"]


def chromium() -> str:
    """The browser's path; skips the test when there is none."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("no Chromium here (.ci/run installs Debian's chromium)")


def browser(url: str, *extra: str, profile: Path, window: str = "1400,1000") -> subprocess.CompletedProcess[str]:
    """Open ``url`` headless (its scripts run for up to 8 s of virtual time) with ``extra`` flags, e.g.
    ``--dump-dom`` or ``--screenshot=...``; the browser's stdout and stderr are returned."""
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--enable-logging=stderr",
        "--v=0",
        "--hide-scrollbars",
        "--virtual-time-budget=8000",
        f"--window-size={window}",
    ]
    return subprocess.run([chromium(), *flags, *extra, url], capture_output=True, text=True, timeout=180)
