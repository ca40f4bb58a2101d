"""The report's timeline kept between looks: a store that grew by later steps is drawn from the kept timeline
(only the new lines read), and one whose new lines can change the timeline (a span of the window's steps, a
late child of a drawn span, the parent a drawn chain waited for, a rewritten file) is drawn again; every
timeline is the one a read without the cache draws."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lens_rl.offline.run import timeline as timeline_module
from lens_rl.offline.run.cache import cache_folder
from lens_rl.offline.run.timeline import page_data
from lens_rl.offline.run.window import KEPT
from lens_rl.store import span_files
from tests.stores import grow_store, span


def _look(run: Path, drawn: list[str], **options: Any) -> dict[str, Any]:
    """The page's window and timeline through the cache, asserted equal to a read without it; ``drawn``
    gets the files this look drew again."""
    paths = span_files(run)
    warm = page_data(paths, jobs=1, cache=cache_folder(run), **options)
    again = list(drawn)
    cold = page_data(paths, jobs=1, **options)
    assert warm.window == cold.window
    assert json.dumps(warm.timeline, sort_keys=True) == json.dumps(cold.timeline, sort_keys=True)
    drawn.clear()
    return {"window": warm.window, "timeline": warm.timeline, "drawn": again}


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The files each look draws again (the calls of the full pass)."""
    calls: list[str] = []
    marked = timeline_module.window_file_marked

    def spy(path: Any, *args: Any) -> Any:
        calls.append(Path(path).name)
        return marked(path, *args)

    monkeypatch.setattr(timeline_module, "window_file_marked", spy)
    return calls


def test_a_store_grown_by_later_steps_is_drawn_from_the_kept_timeline(tmp_path: Path, drawn: list[str]) -> None:
    """The window (the slowest step and its neighbours) lies in the first steps; steps appended later leave
    it as it was: the second look draws no file again, the kept timeline is sealed, and a third look after
    more steps still reuses it."""
    run = tmp_path / "r"
    grow_store(run, 0, 20)
    first = _look(run, drawn)
    assert first["timeline"] and len(first["drawn"]) == 10 and (Path(cache_folder(run)) / KEPT).exists()
    grow_store(run, 20, 25)
    assert _look(run, drawn)["drawn"] == []
    grow_store(run, 25, 27)
    assert _look(run, drawn)["drawn"] == []


def test_new_lines_that_can_change_the_timeline_draw_it_again(tmp_path: Path, drawn: list[str]) -> None:
    """A late span of a step in the window, a late child (no step of its own) of a drawn span, the job's root
    written at its end (the parent the drawn chains waited for: their depths change), a file rewritten in place,
    a file gone: each look draws the timeline again, and equals a read without the cache."""
    run = tmp_path / "r"
    grow_store(run, 0, 20)
    window = _look(run, drawn)["window"]
    assert window is not None
    driver = run / "spans-driver-0-1.jsonl"
    worker = run / "spans-lm_policy-3-103.jsonl"
    for path, row in [
        (worker, span("late", 300.0, 301.0, "late-step", bucket="overhead", step=window[0])),
        (driver, span("logging", 4.0, 4.2, "late-child", parent="d0-1", bucket="overhead")),
        (driver, span("rl.job", 0.0, 400.0, "job")),
    ]:
        with path.open("a") as handle:
            handle.write(json.dumps(row) + "\n")
        assert _look(run, drawn)["drawn"], row["n"]
    data = worker.read_bytes()
    worker.write_bytes(data.replace(b'"train"', b'"trxin"'))
    assert _look(run, drawn)["drawn"]
    worker.unlink()  # a file drawn from, gone
    assert _look(run, drawn)["drawn"]


def test_a_kept_timeline_of_another_or_not_sealed_is_not_used(tmp_path: Path, drawn: list[str]) -> None:
    """A kept timeline replaced by one under no seal (planted), or a look for another window (``--steps``):
    drawn again."""
    run = tmp_path / "r"
    grow_store(run, 0, 20)
    _look(run, drawn)
    kept = Path(cache_folder(run)) / KEPT
    kept.write_bytes(b"0" * 64 + b"\n" + kept.read_bytes().partition(b"\n")[2])
    grow_store(run, 20, 21)
    assert _look(run, drawn)["drawn"]
    assert _look(run, drawn, steps=(5, 6))["drawn"]
