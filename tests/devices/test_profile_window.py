"""A profiler window's watcher: it marks the window cut once the process grew by ``max_bytes``, and stops when
told."""

from __future__ import annotations

import time

from lens_rl.devices.profile_window import ALWAYS, Window, watch


def test_the_watcher_marks_a_window_cut_at_max_bytes_and_an_open_window_matches_no_step() -> None:
    """A window whose process grew past ``max_bytes`` is marked ``max_bytes`` (its next boundary stops it); a
    watcher told to stop leaves its window alone; ALWAYS equals no step."""
    grown = Window(3, "torch", "trainer-0-step3", "config", [], None)
    grown.rss0 = 1  # (the process is larger than one byte now: it grew by more than max_bytes=1)
    watch(grown, 1)
    deadline = time.monotonic() + 30
    while grown.cut is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert grown.cut == "max_bytes"
    calm = Window(4, "torch", "trainer-0-step4", "config", [], None)
    calm.rss0 = 1
    watch(calm, 1).set()
    time.sleep(0.3)
    assert calm.cut is None
    assert ALWAYS != 3 and not ALWAYS == 3
