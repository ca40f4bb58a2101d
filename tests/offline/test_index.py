"""The refresh cache's index of each file's headers and steps: a resumed job's look scans only the bytes
appended since the last one (no header scan or driver row read again), a file rewritten, replaced or shrunk is
scanned from its start, a corrupt index is ignored, and every answer is a cold read's."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from lens_rl.offline.read.reduce import file_steps
from lens_rl.offline.run import index as index_module
from lens_rl.offline.run.analyze import analyze
from lens_rl.offline.run.cache import cache_folder
from lens_rl.offline.run.index import INDEX, Index
from lens_rl.store import heads, span_files
from tests.stores import scale_module


def _same(run: Path, made: list[Any] | None = None) -> list[Any]:
    """The report through the cache, asserted equal to a cold read's; the scans the look through the cache
    made (of those ``made`` records), taken out of ``made``."""
    paths = span_files(run)
    warm = analyze(paths, jobs=1, cache=cache_folder(run))
    scans = list(made or [])
    cold = json.loads(json.dumps(analyze(paths, jobs=1), default=str))
    assert json.dumps(warm, sort_keys=True) == json.dumps(cold, sort_keys=True)
    if made is not None:
        made.clear()
    return scans


def _scans(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, int]]:
    """Every scan the index makes: (file, "heads" or "rows", the byte it starts from)."""
    made: list[tuple[str, str, int]] = []
    scan, head_scan = index_module.scan, index_module.heads

    def rows(path: Any, stats: Any, **kw: Any) -> Any:
        made.append((Path(path).name, "rows", kw.get("start", 0)))
        return scan(path, stats, **kw)

    def headers(path: Any, start: int = 0, stop: int | None = None) -> Any:
        made.append((Path(path).name, "heads", start))
        return head_scan(path, start, stop)

    monkeypatch.setattr(index_module, "scan", rows)
    monkeypatch.setattr(index_module, "heads", headers)
    return made


def test_a_resumed_jobs_look_scans_only_what_is_new(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A job of three attempts read once, then its last attempt grown: the second look scans only the grown
    files, each from where the first scan stopped; a third look of the unchanged store scans nothing. The
    index's headers and steps are what a scan of the whole file finds."""
    synth = scale_module()
    synth.synthesize_attempts(tmp_path, 6_000, 4)
    run = tmp_path / "run"
    made = _scans(monkeypatch)
    first = _same(run, made)
    assert first and {start for _name, _kind, start in first} == {0}
    sizes = {p.name: p.stat().st_size for p in span_files(run)}
    synth.append_attempt_steps(tmp_path, 6_000, 4, 3)
    for kept in Path(cache_folder(run)).glob("report-*.json"):
        kept.unlink()
    second = _same(run, made)
    grown = {p.name for p in span_files(run) if p.stat().st_size != sizes[p.name]}
    assert grown and {name for name, _kind, _start in second} == grown
    assert all(start == sizes[name] for name, _kind, start in second), second
    assert any(name.startswith("spans-driver") and kind == "rows" for name, kind, _start in second)
    for kept in Path(cache_folder(run)).glob("report-*.json"):
        kept.unlink()
    assert _same(run, made) == []
    index = Index(cache_folder(run))
    driven = frozenset({0, 1, 2})
    for path in span_files(run):
        assert [h.header for h in index.heads(path)] == [h.header for h in heads(path)]
        assert index.steps(path, driven) == file_steps(path, driven)


def test_a_rewritten_or_replaced_file_is_scanned_from_its_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A driver file rewritten in place at the same size, then replaced by another file, then cut short: each
    look scans it from its start, and answers as a cold read does."""
    synth = scale_module()
    synth.synthesize_attempts(tmp_path, 6_000, 4)
    run = tmp_path / "run"
    _same(run)
    driver = next(p for p in span_files(run) if p.name.startswith("spans-driver"))
    made = _scans(monkeypatch)
    data = driver.read_bytes()
    with driver.open("r+b") as handle:  # rewritten in place at the same size: its mtime moves
        handle.write(data.replace(b'"generation"', b'"generatioN"'))
    assert (driver.name, "rows", 0) in _same(run, made)
    replacement = run / "replacement.tmp"
    replacement.write_bytes(data)
    os.replace(replacement, driver)
    assert (driver.name, "rows", 0) in _same(run, made)
    os.truncate(driver, len(data) // 2)
    assert (driver.name, "rows", 0) in _same(run, made)


def test_a_corrupt_or_foreign_index_is_ignored(tmp_path: Path) -> None:
    """An index that is not JSON, of another version, or of another shape (a state too short, steps of the
    wrong type): read as none, the answer a cold read's, and written anew."""
    synth = scale_module()
    synth.synthesize_attempts(tmp_path, 6_000, 4)
    run = tmp_path / "run"
    _same(run)
    path = Path(cache_folder(run)) / INDEX
    good = json.loads(path.read_bytes())
    name = next(iter(good["files"]))
    short = json.loads(json.dumps(good))
    short["files"][name]["state"] = [1]
    wrong = json.loads(json.dumps(good))
    wrong["files"][name]["steps"] = 7
    for planted in (
        b"{not json",
        json.dumps({**good, "key": "other"}).encode(),
        json.dumps(short).encode(),
        json.dumps(wrong).encode(),
    ):
        path.write_bytes(planted)
        for kept in path.parent.glob("report-*.json"):
            kept.unlink()
        _same(run)
        assert json.loads(path.read_bytes())["key"] == good["key"]
