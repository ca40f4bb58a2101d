"""A second ``lens-rl report`` of an unchanged store returns the page the first one built (kept in the
refresh cache's folder); any change to the store builds it afresh."""

from __future__ import annotations

from pathlib import Path

import pytest

from lens_rl.offline.run.cache import cache_folder
from lens_rl.offline.show.report import write_report
from lens_rl.store import span_files
from tests.stores import synthesized_store

pytest.importorskip("plotly")


def test_an_unchanged_store_gets_its_kept_page_and_a_grown_one_a_new_page(tmp_path: Path) -> None:
    """The second page is the first byte for byte (plotly's chart ids differ on every build, so only a kept
    page matches); after a line is appended, or with another warm-up, the page is built again; no cache:
    built every time."""
    run = synthesized_store(tmp_path, spans=2_000, files=3) / "run"
    paths = span_files(run)
    cache = cache_folder(run)
    out = tmp_path / "report.html"

    def build_report(paths: list[Path], **options: object) -> str:
        write_report(paths, out, **options)
        return out.read_text(encoding="utf-8")

    first = build_report(paths, cache=cache)
    assert build_report(paths, cache=cache) == first
    assert build_report(paths) != first  # (no cache: nothing kept, nothing returned)
    assert build_report(paths, cache=cache, warmup_steps=2) != first
    with open(paths[0], "a") as handle:  # one more (unreadable) line: the store changed
        handle.write("{}\n")
    assert build_report(paths, cache=cache) != first
    assert len(list(Path(cache).glob("page-*.html"))) == 1  # (one page kept per folder)
