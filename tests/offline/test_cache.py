"""The refresh cache gives a cold read's answer, always: a 50 k-span store read cold, grown by whole lines and
by a line still being written, a parent written after its children across two reads, a child written after
its settled parent, a file replaced by another of the same size, a re-init's header, a cache of another
version, a corrupt or planted one, --jobs, --ray, the CLI with and without --no-cache."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
from pathlib import Path
from typing import Any

import msgspec
import pytest

from lens_rl.offline.run import kept
from lens_rl.offline.run.analyze import analyze, analyze_parts
from lens_rl.offline.run.cache import CACHE_DIR, FORMAT, cache_folder
from lens_rl.offline.run.records import EntryRec, MemoRec, decode, encode
from lens_rl.store import span_files
from tests.conftest import lens
from tests.stores import cache_record as record
from tests.stores import grow_store, header, span, step_lines


def _same(run: Path, **options: Any) -> dict[str, Any]:
    """The warm (cached) report, asserted equal to a cold read's."""
    paths = span_files(run)
    warm = analyze(paths, jobs=1, cache=cache_folder(run), **options)
    cold = json.loads(json.dumps(analyze(paths, jobs=1, **options), default=str))
    assert json.dumps(warm, sort_keys=True) == json.dumps(cold, sort_keys=True)
    return warm


@pytest.mark.slow
def test_a_grown_store_reads_as_a_cold_read_does(tmp_path: Path) -> None:
    """About 50 k spans read cold, then grown by whole steps, by a line still being written, and the line
    finished: every warm read equals a cold one (spans, skipped lines, every figure)."""
    run = tmp_path / "r"
    grow_store(run, 0, 2300)
    first = _same(run)
    assert first["spans"] > 50_000 and (run / CACHE_DIR).is_dir()
    grow_store(run, 2300, 2330)
    assert _same(run)["spans"] > first["spans"]
    grow_store(run, 2330, 2340)
    parts, stats = analyze_parts(span_files(run), jobs=1, cache=cache_folder(run))
    assert stats.cache_hits == len(span_files(run))  # read from where the last read stopped, file by file
    _same(run)
    driver = run / "spans-driver-0-1.jsonl"
    line = json.dumps(span("generation", 23300, 23302, "late-gen", parent="s2330", bucket="productive"))
    with driver.open("a") as handle:
        handle.write(line[: len(line) // 2])  # the writer is mid-line
    half = _same(run)
    assert half["skipped_lines"] == 1
    with driver.open("a") as handle:
        handle.write(line[len(line) // 2 :] + "\n")
    assert _same(run)["skipped_lines"] == 0
    assert _same(run)["spans"] == half["spans"] + 1  # an unchanged store, answered from the cache


def test_a_parent_after_its_children_and_a_child_after_its_parent(tmp_path: Path) -> None:
    """A step's phases read before its umbrella is written (held, then settled with it); a child that
    outlived its settled parent (the file read cold again): both equal a cold read."""
    run = tmp_path / "r"
    grow_store(run, 0, 3)
    _same(run)
    rows = step_lines(3)
    driver = run / "spans-driver-0-1.jsonl"
    with driver.open("a") as handle:  # the phases of step 3, the umbrella not yet
        for row in rows["driver"][:-1]:
            handle.write(json.dumps(row) + "\n")
    held = _same(run)
    assert [s["step"] for s in held["steps"]] == [0, 1, 2]  # step 3's phases wait for their umbrella
    with driver.open("a") as handle:
        handle.write(json.dumps(rows["driver"][-1]) + "\n")
    assert [s["step"] for s in _same(run)["steps"]] == [0, 1, 2, 3]
    with driver.open("a") as handle:  # a child of step 1's settled umbrella, written after it
        handle.write(json.dumps(span("logging", 19.6, 19.9, "late-child", parent="s1", bucket="overhead")) + "\n")
    _same(run)


def test_a_replaced_file_a_new_header_and_parallel_reads(tmp_path: Path) -> None:
    """A file replaced by another of the same size (another inode), a re-init's header appended, and --jobs 2:
    equal to a cold read."""
    run = tmp_path / "r"
    grow_store(run, 0, 40)
    _same(run)
    target = run / "spans-lm_policy-0-100.jsonl"
    data = target.read_bytes().replace(b'"train"', b'"trxin"')
    replacement = run / "replacement.tmp"
    replacement.write_bytes(data)
    os.replace(replacement, target)
    assert any(p["phase"] == "trxin" for p in _same(run)["phases"])
    with target.open("a") as handle:
        handle.write(json.dumps(header("lm_policy", 0, 100, **{"rl.attempt": 0, "rl.model.name": "m2"})) + "\n")
        handle.write(json.dumps(span("train", 500, 501, "after-reinit", bucket="productive", step=50)) + "\n")
    _same(run)
    paths = span_files(run)
    two = analyze(paths, jobs=2, cache=cache_folder(run))
    one = json.loads(json.dumps(analyze(paths, jobs=1), default=str))
    assert json.dumps(two, sort_keys=True) == json.dumps(one, sort_keys=True)


def test_a_foreign_corrupt_or_planted_cache_is_never_trusted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A cache of another version, a corrupt one and a planted pickle that would run code: each ignored with
    one line, the answer a cold read's, the planted code never run (a cache record is MessagePack, never a
    pickle)."""
    run = tmp_path / "r"
    grow_store(run, 0, 20)
    _same(run)
    folder = Path(cache_folder(run))
    for report in folder.glob("report-*.json"):
        report.unlink()
    victim = folder / "spans-lm_policy-1-101.jsonl.cache"
    magic = FORMAT.encode() + b"\n"
    data = victim.read_bytes()
    assert data.startswith(magic)
    length = int.from_bytes(data[len(magic) : len(magic) + 8], "little")
    entry = decode(data[len(magic) + 8 : len(magic) + 8 + length], EntryRec)
    other = msgspec.structs.replace(entry, options=entry.options.replace("(", "('0.0.0-other', ", 1))
    victim.write_bytes(magic + record(encode(other)))
    (folder / "spans-lm_policy-2-102.jsonl.cache").write_bytes(magic + record(b"\xc1garbage"))
    marker = tmp_path / "planted"

    class Planted:
        def __reduce__(self) -> Any:
            return (os.system, (f"touch {marker}",))

    (folder / "spans-lm_policy-3-103.jsonl.cache").write_bytes(magic + record(pickle.dumps(Planted())))
    caplog.set_level("WARNING", "lens_rl")
    _same(run)
    assert not marker.exists()
    (line,) = [r.getMessage() for r in caplog.records if "cache file(s) not used" in r.getMessage()]
    assert "3 cache file(s) not used" in line


def _goodput(tmp_path: Path, *extra: str) -> str:
    """``lens-rl goodput TMP/traces --json EXTRA``'s output (it must succeed)."""
    out = lens("goodput", str(tmp_path / "traces"), "--json", *extra)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_the_cli_reads_through_the_cache_and_no_cache_reads_cold(tmp_path: Path) -> None:
    """lens-rl goodput --json with and without the cache print the same bytes; the cache is in the run folder."""
    run = tmp_path / "traces" / "r"
    grow_store(run, 0, 30)

    cold = _goodput(tmp_path, "--no-cache")
    assert not (run / CACHE_DIR).exists()
    assert _goodput(tmp_path) == cold and _goodput(tmp_path) == cold and (run / CACHE_DIR).is_dir()


@pytest.mark.slow
def test_ray_reads_through_the_cache_with_the_same_answer(tmp_path: Path) -> None:
    """--ray: the files read as Ray tasks through the cache (cold, then grown) print what a cold local read
    prints."""
    pytest.importorskip("ray")
    run = tmp_path / "traces" / "r"
    grow_store(run, 0, 30)

    assert _goodput(tmp_path, "--ray") == _goodput(tmp_path, "--no-cache", "--jobs", "1")
    grow_store(run, 30, 40)
    assert _goodput(tmp_path, "--ray") == _goodput(tmp_path, "--no-cache", "--jobs", "1")


class _Planted:
    """What a planted pickle would run when loaded: it makes a file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.marker,))


def test_a_second_look_walks_only_the_steps_that_new_spans_can_reach(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The critical path of a step that ended before every span read since the last look is kept, not walked
    again: 5 steps appended to 40 walk 5. A late worker span of step 10 walks step 10 on; a rewritten or
    removed file, or a corrupt or planted memo, walks every step. Every answer is a cold read's."""
    import lens_rl.offline.rollup.critical as critical

    walked: list[int] = []
    walk = critical._walked
    monkeypatch.setattr(critical, "_walked", lambda *a: walked.append(1) or walk(*a))

    def look() -> int:
        walked.clear()
        paths = span_files(run)
        warm = analyze(paths, jobs=1, cache=cache_folder(run))
        walks = len(walked)
        cold = json.loads(json.dumps(analyze(paths, jobs=1), default=str))
        assert json.dumps(warm, sort_keys=True) == json.dumps(cold, sort_keys=True)
        return walks

    run = tmp_path / "r"
    grow_store(run, 0, 40)
    assert look() == 40
    grow_store(run, 40, 45)
    assert look() == 5
    worker = run / "spans-lm_policy-4-104.jsonl"
    late = span("train", 103.2, 105.4, "late-w4", parent="d10-1", remote=True, bucket="productive", step=10)
    with worker.open("a") as handle:  # a slow exporter's span of step 10, longer than the rest
        handle.write(json.dumps(late) + "\n")
    assert look() == 35
    replacement = run / "replacement.tmp"
    replacement.write_bytes(worker.read_bytes().replace(b'"train"', b'"trxin"'))
    os.replace(replacement, worker)
    assert look() == 45
    (run / "spans-lm_policy-5-105.jsonl").unlink()
    assert look() == 45
    folder = Path(cache_folder(run))
    for report in folder.glob("report-*.json"):
        report.unlink()
    memo_file = folder / "critical-memo.msgpack"
    memo = memo_file.read_bytes()
    memo_file.write_bytes(memo[: len(memo) // 2])  # cut short
    caplog.set_level("WARNING", "lens_rl")
    assert look() == 45
    _, _, body = memo[8:].partition(b"\n")
    planted = decode(body, MemoRec)
    planted.records[3][4] = [len(planted.keys) + 7, 1]  # well-formed, under another's seal
    body = encode(planted)
    memo_file.write_bytes(_framed(hashlib.sha256(body).hexdigest().encode() + b"\n" + body))
    for report in folder.glob("report-*.json"):
        report.unlink()
    assert look() == 45
    marker = tmp_path / "ran"
    planted = {"key": _Planted(marker), "tokens": {}, "keys": [], "records": []}  # code, under the user's seal
    memo_file.write_bytes(_framed(kept.sealed(pickle.dumps(planted)) or b""))
    for report in folder.glob("report-*.json"):
        report.unlink()
    assert look() == 45 and not marker.exists()
    said = [r.getMessage() for r in caplog.records if "(the critical path's: " in r.getMessage()]
    assert len(said) == 1 and "corrupt (ValidationError)" in said[0], said


def test_a_store_seen_growing_keeps_its_whole_answer_only_once_it_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first look keeps the whole report; a look that found files grown keeps none (a live run is looked at
    again grown: it could not be used); the first look that finds nothing new keeps it, and the next look is
    that report, no file read. Every answer is a cold read's."""
    import lens_rl.offline.run.analyze as run_analyze

    run = tmp_path / "r"
    grow_store(run, 0, 10)
    folder = cache_folder(run)

    def look() -> tuple[dict[str, Any], bool]:
        paths = span_files(run)
        warm = analyze(paths, jobs=1, cache=folder)
        cold = analyze(paths, jobs=1)
        assert json.dumps(warm, sort_keys=True, default=str) == json.dumps(cold, sort_keys=True, default=str)
        return warm, kept.load_report(folder, kept.store_fingerprint(paths, (True, [])))[0] is not None

    assert look()[1]  # (a first look)
    grow_store(run, 10, 12)
    assert not look()[1]  # (grown since the last look)
    answer, keeps = look()
    assert keeps  # (nothing new: the store stopped)

    def no_read(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a look at a store whose answer is kept read its files")

    monkeypatch.setattr(run_analyze, "analyze_parts", no_read)
    assert analyze(span_files(run), jobs=1, cache=folder) == answer


def _framed(record: bytes) -> bytes:
    """A record as the cache's files hold one: its length, then it."""
    return len(record).to_bytes(8, "little") + record


def test_grown_bytes_say_how_much_is_new_since_the_last_look(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a look decides whether to start worker processes on: nothing recorded (infinity), nothing new
    (0), an appended line (its bytes), a new file (all of it); a look at that little reads in its own process."""
    import concurrent.futures

    from lens_rl.offline.run.cache import grown_bytes

    run = tmp_path / "r"
    grow_store(run, 0, 3)
    folder = cache_folder(run)
    assert grown_bytes(folder, span_files(run)) == float("inf")
    analyze(span_files(run), cache=folder)
    assert grown_bytes(folder, span_files(run)) == 0
    line = json.dumps(span("train", 40, 41, "more", bucket="productive", step=3)) + "\n"
    with (run / "spans-lm_policy-0-100.jsonl").open("a") as handle:
        handle.write(line)
    assert grown_bytes(folder, span_files(run)) == len(line)
    extra = run / "spans-lm_policy-9-109.jsonl"
    extra.write_text(json.dumps(header("lm_policy", 9, 109)) + "\n" + line)
    assert grown_bytes(folder, span_files(run)) == len(line) + extra.stat().st_size

    def no_pool(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a small refresh started worker processes")

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", no_pool)
    assert analyze(span_files(run), cache=folder)["spans"] == analyze(span_files(run), jobs=1)["spans"]


@pytest.mark.timeout(120)
def test_a_file_rewritten_in_place_is_read_cold(tmp_path: Path) -> None:
    """A span file rewritten in place (same size, inode, first line and last 4 KB; even its mtime put back)
    is read cold: the cached answer is the new content's, as --no-cache gives it."""
    run = tmp_path / "r"
    grow_store(run, 0, 200)
    before = _same(run)
    path = span_files(run)[0]
    data = path.read_bytes()
    at = data.index(b'"productive"', len(data) // 3)
    assert at < len(data) - 4096
    info = os.stat(path)
    with open(path, "r+b") as handle:  # (one bucket changed: the same length, the same inode)
        handle.seek(at)
        handle.write(b'"overhead"  ')
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (info.st_ino, info.st_size, info.st_mtime_ns)
    assert _same(run) != before


def _records(path: Path) -> list[bytes]:
    """The records of a cache entry's file."""
    data, at, out = path.read_bytes(), len(FORMAT) + 1, []
    while at < len(data):
        length = int.from_bytes(data[at : at + 8], "little")
        out.append(data[at + 8 : at + 8 + length])
        at += 8 + length
    return out


def test_a_look_appends_only_what_is_new_to_each_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A look at a grown store appends one record to each grown file's entry and leaves the bytes before it as
    they were; after MAX_RECORDS records a look rewrites the entry whole (one record). Every answer is a cold
    read's."""
    from lens_rl.offline.run import cache_files

    monkeypatch.setattr(cache_files, "MAX_RECORDS", 3)
    run = tmp_path / "r"
    grow_store(run, 0, 20)
    _same(run)
    entry = Path(cache_folder(run)) / "spans-lm_policy-1-101.jsonl.cache"
    first = entry.read_bytes()
    assert len(_records(entry)) == 1
    for step, records in ((20, 2), (21, 3), (22, 1), (23, 2)):
        grow_store(run, step, step + 1)
        _same(run)
        assert len(_records(entry)) == records
        if records == 2 and step == 20:
            assert entry.read_bytes().startswith(first)


def test_a_look_without_steps_leaves_the_phases_per_step_unread_yet_an_entry_written_whole_keeps_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A look without --steps leaves the settled parts' phases per step (what only --steps A-B reads, a third
    of a run's records) unread: a look that appends its delta never reads them, one that rewrites an entry
    whole reads them from the bytes it read. A --steps look after looks that appended and rewrote gives a
    cold read's answer."""
    from lens_rl.offline.run import cache_files
    from lens_rl.offline.run.records import UnreadSteps

    monkeypatch.setattr(cache_files, "MAX_RECORDS", 3)
    run = tmp_path / "r"
    grow_store(run, 0, 20)
    _same(run)
    path = Path(cache_folder(run)) / "spans-lm_policy-1-101.jsonl.cache"
    rec = decode(_records(path)[0], EntryRec)
    unread, _ = cache_files.load_entry(path, rec.options, tuple(rec.identity), phase_steps=False)
    read, _ = cache_files.load_entry(path, rec.options, tuple(rec.identity))
    assert unread is not None and read is not None
    assert all(type(p.phase_steps) is UnreadSteps and not p.phase_steps for p in unread.settled.values())
    assert any(p.phase_steps for p in read.settled.values())
    for step, records in ((20, 2), (21, 3), (22, 1), (23, 2)):  # (appended twice, rewritten whole, appended)
        grow_store(run, step, step + 1)
        _same(run)
        assert len(_records(path)) == records
    _same(run, steps=(3, 22))


def test_two_looks_that_appended_at_once_and_a_record_cut_short(tmp_path: Path) -> None:
    """Two looks that appended to the same entry from the same state (the second's record is skipped: its spans
    are read again), and an entry whose last record was cut short by a killed look (the state before it
    stands; the next look writes the entry whole): every answer is a cold read's."""
    run = tmp_path / "r"
    grow_store(run, 0, 20)
    _same(run)
    entry = Path(cache_folder(run)) / "spans-lm_policy-1-101.jsonl.cache"
    before = entry.read_bytes()
    grow_store(run, 20, 22)
    _same(run)
    ours = entry.read_bytes()[len(before) :]
    entry.write_bytes(before)  # the other look, from the same state (no report kept: the entries are read)
    for kept_report in entry.parent.glob("report-*.json"):
        kept_report.unlink()
    _same(run)
    theirs = entry.read_bytes()[len(before) :]
    assert ours and theirs and ours != theirs
    entry.write_bytes(before + ours + theirs)
    grow_store(run, 22, 23)
    _same(run)
    assert len(_records(entry)) == 4
    entry.write_bytes(entry.read_bytes()[:-5])
    grow_store(run, 23, 24)
    _same(run)
    assert len(_records(entry)) == 1
