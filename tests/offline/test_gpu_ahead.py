"""A look's GPU work done beside its other work (sample files read while the span files are, the join run
while the rollup merges the parts) gives the same look as done in turn."""

from __future__ import annotations

import json
import time
from concurrent.futures import Future
from pathlib import Path

from lens_rl.offline.read import gpu_samples
from lens_rl.offline.run.analyze import analyze_parts
from lens_rl.offline.run.gpu import gpu_look
from lens_rl.offline.run.gpu_ahead import join_ahead, read_ahead
from lens_rl.store import ReadStats, span_files
from tests.gpu_stores import write_scripted_job


def test_a_look_read_and_joined_ahead_is_the_look_done_in_turn(tmp_path: Path) -> None:
    """Read ahead and joined on a thread, with the parts emptied of their GPU columns as soon as the join is
    started (as the rollup's merges change them), the look's section, warnings and counts are the same."""
    paths = span_files(str(write_scripted_job(tmp_path / "run")))
    parts, stats = analyze_parts(paths, jobs=1)
    before = ReadStats()
    look = gpu_look(paths, parts, before, None, 1)
    ahead_stats = ReadStats()
    ahead = read_ahead(paths, None, 2)
    assert isinstance(ahead, Future) == gpu_samples.SCANNER  # (no scanner: read when the look asks, alike)
    joining = join_ahead(paths, parts, ahead_stats, None, 2, ahead)
    counted = (ahead_stats.files, ahead_stats.lines, ahead_stats.skipped, list(ahead_stats.notes))
    assert counted == (before.files, before.lines, before.skipped, before.notes) and before.files == 2
    for part in parts:  # (what the rollup's merges may do to the parts meanwhile)
        part.gpu = None
    later = joining.result()
    assert look.section is not None and later.paths == look.paths and list(later.devices) == list(look.devices)
    assert json.dumps([later.section, later.warnings]) == json.dumps([look.section, look.warnings])


def test_a_look_that_fails_while_samples_are_read_ahead_exits_at_once(tmp_path: Path) -> None:
    """The look raising (or interrupted) while its sample files are still being read ahead: the process exits
    with its error at once, not once the reading ends; the reading's own error is the future's."""
    from tests.conftest import run_python

    code = """
import time
from lens_rl.offline.run import gpu_ahead
def slow(*args):
    time.sleep(60)
future = gpu_ahead._on_thread(slow)
failed = gpu_ahead._on_thread(lambda: 1 / 0)
try:
    failed.result(10)
except ZeroDivisionError:
    print("the reading's error is the future's")
raise SystemExit("the look failed")
"""
    started = time.monotonic()
    out = run_python(code)
    assert out.returncode == 1 and "the look failed" in out.stderr
    assert "the reading's error is the future's" in out.stdout
    assert time.monotonic() - started < 30
