"""A second ``lens-rl report`` of an unchanged store returns the page the first one built (kept in the
refresh cache's folder); any change to the store builds it afresh. A page is a function of the store and
the options only: two reports of one store, through the cache or with ``--no-cache``, are the same bytes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lens_rl.offline.run.cache import cache_folder
from lens_rl.offline.show.report import write_report
from lens_rl.store import span_files
from tests.conftest import lens
from tests.stores import synthesized_store

pytest.importorskip("plotly")


def test_an_unchanged_store_gets_its_kept_page_and_a_grown_one_a_new_page(tmp_path: Path) -> None:
    """The second page is the kept one (no page kept anew); no cache: built every time, the same bytes; with
    another warm-up, or after a line is appended, the page is built again and kept under the store's new
    fingerprint, and equals the page built with no cache."""
    run = synthesized_store(tmp_path, spans=2_000, files=3) / "run"
    paths = span_files(run)
    cache = cache_folder(run)
    out = tmp_path / "report.html"

    def build_report(paths: list[Path], **options: object) -> str:
        write_report(paths, out, **options)
        return out.read_text(encoding="utf-8")

    def kept() -> list[str]:
        return sorted(p.name for p in Path(cache).glob("page-*.html"))

    first = build_report(paths, cache=cache)
    kept_first = kept()
    assert build_report(paths, cache=cache) == first and kept() == kept_first
    assert build_report(paths) == first  # (no cache: built afresh, nothing kept)
    assert build_report(paths, cache=cache, warmup_steps=2) != first
    with open(paths[0], "a") as handle:  # one more (unreadable) line: the store changed
        handle.write("{}\n")
    grown = build_report(paths, cache=cache)
    assert kept() != kept_first and len(kept()) == 1  # (built again, one page kept per folder)
    assert grown == build_report(paths)


def test_two_reports_of_one_store_are_the_same_bytes(tmp_path: Path) -> None:
    """``lens-rl report`` twice with ``--no-cache``, and twice through a cold cache (a copy of the store), write
    identical files: no random chart id, nothing of the moment it ran (plotly's default ids are uuids)."""
    run = synthesized_store(tmp_path, spans=2_000, files=3) / "run"
    copy = tmp_path / "copy" / "run"
    shutil.copytree(run, copy)
    pages = []
    for folder, extra in ((run, ["--no-cache"]), (run, ["--no-cache"]), (run, []), (copy, [])):
        out = tmp_path / f"page-{len(pages)}.html"
        done = lens("report", str(folder.parent), "--run", "run", "-o", str(out), *extra)
        assert done.returncode == 0, done.stderr
        pages.append(out.read_bytes())
    assert pages[0] == pages[1] == pages[2] == pages[3]
