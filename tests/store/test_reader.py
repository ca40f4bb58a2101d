"""The store's reader: v2 files only, bad lines skipped and counted, the same rows with or without the fast
parsers, and a file of any other shape skipped with one note naming it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lens_rl.store import ReadStats, iter_rows, read_head, span_files
from tests.stores import EPOCH_NS, header, span, write_process

#: a plain read's cache counters (the refresh cache's, which a read of the store alone never touches)
NO_CACHE = {"cache_hits": 0, "cache_notes": [], "cache_reads": []}


def test_a_file_of_another_shape_is_skipped_with_one_note(tmp_path: Path) -> None:
    """A v1 file (long keys, the resource on every line) or any file that does not start with a v2 header
    yields nothing, and one note names it; a v2 file beside it reads."""
    v1 = {
        "v": 1,
        "name": "old",
        "span_id": "1" * 16,
        "trace_id": "2" * 32,
        "start_ns": 1,
        "end_ns": 2,
        "resource": {"rl.worker_group": "driver"},
    }
    (tmp_path / "spans-driver-0-1.jsonl").write_text(json.dumps(v1) + "\n" + json.dumps(v1) + "\n")
    write_process(tmp_path, "lm_policy", 0, 2, [span("new", 0, 1, "n")])
    stats = ReadStats()
    rows = [(head.process.group, row.n) for path in span_files(tmp_path) for head, row in iter_rows(path, stats)]
    assert rows == [("lm_policy", "new")]
    assert stats.notes == ["spans-driver-0-1.jsonl: not a lens_rl store file (its first line is no v2 header); skipped"]
    assert (stats.files, stats.lines, stats.skipped) == (2, 4, 2)


def test_truncated_and_garbage_lines_are_skipped_and_counted(tmp_path: Path) -> None:
    """A killed writer's half line, a line that is no JSON object, a span with no name, a repeated span id:
    skipped and counted, never raised on."""
    good = json.dumps(span("a", 0, 1, "a"))
    path = tmp_path / "spans-x.jsonl"
    path.write_text(
        "\n".join(
            [json.dumps(header("w", 0, 1)), good, "not json", "[1, 2]", json.dumps({"s": "9" * 16}), good, good[:20]]
        )
    )
    stats = ReadStats()
    assert [row.n for _, row in iter_rows(path, stats)] == ["a"]
    assert (stats.files, stats.lines, stats.skipped, stats.duplicates) == (1, 7, 4, 1)


def test_a_header_names_the_process_never_the_file_name(tmp_path: Path) -> None:
    """Group, rank, pid, attempt and the driver's role come from the header; a later header (a re-init in the
    same process) applies to the lines after it."""
    path = tmp_path / "spans-whatever.jsonl"
    lines = [
        header("driver-pool", 3, 7, **{"rl.attempt": 2}),
        span("a", 0, 1, "a"),
        {**header("driver", 0, 7), "role": "driver"},
        span("b", 1, 2, "b"),
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    procs = [(head.process, row.n) for head, row in iter_rows(path)]
    assert [(p.group, p.rank, p.pid, p.attempt, p.driver, n) for p, n in procs] == [
        ("driver-pool", 3, 7, 2, False, "a"),
        ("driver", 0, 7, 0, True, "b"),
    ]
    head, more = read_head(path)
    assert head is not None and head.process.group == "driver-pool" and more


def test_the_reader_keeps_good_rows_and_counts_the_rest(tmp_path: Path) -> None:
    """A store reads as its good rows and honest counts: a header later in the file, garbage, a repeated span
    id, a line that is not an object, ids of another form (a number is an id; a list is garbage), keys of other
    JSON types (a list for a name, text for the attributes or a time) and lines with no name (garbage)."""
    v2 = {
        "n": "new",
        "s": "3" * 16,
        "p": "1" * 16,
        "t": "2" * 32,
        "b": EPOCH_NS + 3,
        "e": EPOCH_NS + 4,
        "a": {"rl.bucket": "idle"},
        "th": 7,
        "tn": "MainThread",
        "st": "ERROR",
        "sm": "boom",
        "ev": [{"n": "e", "ts": 3, "a": {"x": 1}}],
        "ln": [{"t": "2" * 32, "s": "4" * 16}],
        "sc": "aiohttp",
        "k": "CLIENT",
        "extra": [1],
    }
    lines = [
        header("driver", 0, 1),
        v2,
        v2,
        [1, 2],
        "garbage",
        {**v2, "s": "5" * 16, "b": "x"},
        header("driver", 0, 3),
        {**v2, "s": "6" * 16, "p": None, "a": None},
        {**v2, "s": 9},
        {**v2, "s": [9]},
        {"n": "no id"},
        {**v2, "s": "d" * 16, "n": [1]},
        {**v2, "s": "e" * 16, "a": "x"},
        {**v2, "s": "f" * 16, "ev": [1]},
        {**v2, "s": "d" * 15 + "e", "n": None},
        {**v2, "s": "e" * 15 + "f", "th": True},
    ]
    text = "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines)
    (tmp_path / "spans-driver-0-1.jsonl").write_text(text[:-1] + "\n")  # (the last line cut short)
    stats = ReadStats()
    rows = [(h.process, r) for f in span_files(tmp_path) for h, r in iter_rows(f, stats)]
    read = {"stats": vars(stats), "rows": [(p, {"s": r.s}) for p, r in rows]}
    assert read["stats"] == {"files": 1, "lines": 16, "skipped": 10, "duplicates": 1, "notes": [], **NO_CACHE}
    assert [(r["s"], p[2]) for p, r in read["rows"]] == [("3" * 16, 1), ("6" * 16, 3), (9, 3)]  # (a text time: bad)


def test_the_typed_row_allows_the_json_types_the_format_declares() -> None:
    """The typed Row msgspec decodes into allows exactly the JSON types the format declares for every key
    (FIELD_TYPES, which docs/store-format.md describes): a line is garbage for the reader as for the doc."""
    import typing

    import msgspec

    from lens_rl.store import FIELD_TYPES, Row

    def plain(kind: Any) -> Any:  # (a constrained type, Annotated[int, Meta(...)], is its base type)
        return typing.get_args(kind)[0] if typing.get_origin(kind) is typing.Annotated else kind

    typed = {}
    for field in msgspec.structs.fields(Row):
        if field.type is not typing.Any:
            allowed = [
                typing.get_origin(plain(t)) or plain(t) for t in typing.get_args(field.type) if t is not type(None)
            ]
            typed[field.name] = set(allowed)
    assert typed == {key: set(types) for key, types in FIELD_TYPES.items()}


def test_heads_finds_every_header_of_a_file_whatever_the_chunk_boundaries(tmp_path: Path) -> None:
    """A file that a restarted process (same pid) appended to has several headers; heads() finds each by a byte
    scan (one across the scan's 1 MiB chunk boundary too), and driver_attempts() the drivers' attempts."""
    from lens_rl.store import driver_attempts, heads

    path = write_process(tmp_path, "driver", 0, 5, [span("x", 0, 1, "a")], **{"rl.attempt": 0})
    filler = json.dumps(span("x", 0, 1, "b"))
    boundary = len(path.read_bytes().split(b"\n", 1)[0]) + 1 + (1 << 20)  # where the scan's first chunk ends
    with path.open("a") as handle:
        written = path.stat().st_size
        while written < boundary - 400:
            handle.write(filler + "\n")
            written += len(filler) + 1
        pad = json.dumps(span("x", 0, 1, "c", pad=""))  # ends so the header's '{' is the chunk's last byte
        handle.write(pad.replace('"pad": ""', '"pad": "' + "p" * (boundary - 1 - written - len(pad) - 1) + '"') + "\n")
        handle.write(json.dumps(header("driver", 0, 5, **{"rl.attempt": 1})) + "\n")
        handle.write(filler + "\n")
        handle.write(json.dumps(header("driver", 0, 5, **{"rl.attempt": 2})) + "\n")
    assert path.read_bytes()[boundary - 2 : boundary + 3] == b'\n{"v"'
    assert [h.process.attempt for h in heads(path)] == [0, 1, 2]
    write_process(tmp_path, "lm_policy", 0, 6, [], **{"rl.attempt": 8})
    attempts, last_write = driver_attempts(tmp_path)
    assert attempts == {0, 1, 2} and last_write == max(p.stat().st_mtime_ns for p in tmp_path.iterdir())
    assert driver_attempts(tmp_path / "absent") == (set(), None)
    (tmp_path / "spans-other.jsonl").write_text("not a store file\n")
    assert heads(tmp_path / "spans-other.jsonl") == []


@pytest.mark.timeout(60)
def test_only_regular_files_are_opened_and_each_other_entry_is_named(tmp_path: Path) -> None:
    """span_files keeps the regular files (a link to one too) and names, in one note each, a directory, a
    dangling link, a link loop, a FIFO and a device named like span files; none is opened (a FIFO would
    block) and reading the kept ones ignores them."""
    import os

    from lens_rl.store import UnreadableError, open_file

    good = write_process(tmp_path, "driver", 0, 1, [span("x", 0, 1, "x")])
    (tmp_path / "spans-link-0-2.jsonl").symlink_to(good)
    (tmp_path / "spans-dir-0-3.jsonl").mkdir()
    (tmp_path / "spans-dangling-0-4.jsonl").symlink_to(tmp_path / "gone")
    (tmp_path / "spans-loop-0-5.jsonl").symlink_to(tmp_path / "spans-loop-0-5.jsonl")
    os.mkfifo(tmp_path / "spans-fifo-0-6.jsonl")
    (tmp_path / "spans-zero-0-7.jsonl").symlink_to("/dev/zero")
    notes: list[str] = []
    assert [p.name for p in span_files(tmp_path, notes)] == ["spans-driver-0-1.jsonl", "spans-link-0-2.jsonl"]
    assert notes == [
        "spans-dangling-0-4.jsonl: a dangling symbolic link; skipped",
        "spans-dir-0-3.jsonl: a directory; skipped",
        "spans-fifo-0-6.jsonl: a FIFO; skipped",
        "spans-loop-0-5.jsonl: a symbolic link loop; skipped",
        "spans-zero-0-7.jsonl: a device; skipped",
    ]
    for name in ("spans-fifo-0-6.jsonl", "spans-zero-0-7.jsonl", "spans-dir-0-3.jsonl"):
        with pytest.raises(UnreadableError):
            open_file(tmp_path / name)
        stats = ReadStats()
        assert list(iter_rows(tmp_path / name, stats)) == [] and len(stats.notes) == 1
        assert read_head(tmp_path / name) == (None, False)


@pytest.mark.timeout(60)
def test_an_overlong_line_is_skipped_and_the_lines_after_it_read(tmp_path: Path) -> None:
    """A line longer than 16 MiB (first or later) is one skipped line, read in bounded chunks; the lines
    after it read, at their right offsets."""
    from lens_rl.store import LINE_MAX, scan

    path = write_process(tmp_path, "driver", 0, 1, [span("a", 0, 1, "a")])
    with open(path, "a") as handle:
        handle.write(json.dumps(span("huge", 1, 2, "h", note="x" * LINE_MAX)) + "\n")
        handle.write(json.dumps(span("b", 2, 3, "b")) + "\n")
    stats = ReadStats()
    found = [(row.n, at, size) for _, row, at, size in scan(path, stats)]
    data = path.read_bytes()
    assert [n for n, _, _ in found] == ["a", "b"] and stats.skipped == 1 and stats.lines == 4
    assert all(data[at : at + size].startswith(b'{"n": "' + n.encode()) for n, at, size in found)
    first = tmp_path / "spans-long-0-2.jsonl"
    first.write_bytes(b"x" * (LINE_MAX + 10) + b"\n" + data)
    stats = ReadStats()
    assert list(iter_rows(first, stats)) == [] and stats.lines == 5 and stats.skipped == 5
    assert read_head(first) == (None, True)


def test_a_span_outside_plausible_times_is_a_bad_line(tmp_path: Path) -> None:
    """Times before 2000 or from 2200 on, an end before the start, times that are not integers, and times
    past 64 bits: each such line is skipped and counted; a span of no length reads."""
    from lens_rl.store import TIME_MAX_NS, TIME_MIN_NS

    good = span("ok", 0, 0, "ok")
    lines = [
        good,
        {**good, "s": "1" * 16, "b": TIME_MIN_NS - 1},
        {**good, "s": "2" * 16, "e": TIME_MAX_NS},
        {**good, "s": "3" * 16, "e": good["b"] - 1},
        {**good, "s": "4" * 16, "b": float(good["b"])},
        {**good, "s": "5" * 16, "b": -(2**63), "e": 2**63 - 1},
        {**good, "s": "6" * 16, "e": 2**64},
        {**good, "s": "7" * 16, "b": None},
        {**good, "s": "8" * 16, "b": TIME_MIN_NS, "e": TIME_MAX_NS - 1},
    ]
    path = write_process(tmp_path, "driver", 0, 1, lines)
    stats = ReadStats()
    assert [row.s for _, row in iter_rows(path, stats)] == [good["s"], "8" * 16] and stats.skipped == 7


def test_runs_of_rows_hold_one_header_each_and_are_the_lines_a_scan_yields(tmp_path: Path) -> None:
    """scan_runs gives the very rows, offsets and lengths scan gives, in runs of at most RUN_ROWS rows that
    never cross a header (a re-init applies from its line on)."""
    from lens_rl.store import scan, scan_runs
    from lens_rl.store.reader import RUN_ROWS

    path = tmp_path / "spans-x.jsonl"
    lines = [header("w", 0, 7)] + [span("a", 0, 1, f"a{i}") for i in range(RUN_ROWS + 3)]
    lines += [header("w", 1, 7), span("b", 1, 2, "b"), span("b", 1, 2, "b")]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\nnot json\n")
    runs = list(scan_runs(path, ReadStats()))
    assert [(head.process.rank, len(rows)) for head, rows, _, _ in runs] == [(0, RUN_ROWS), (0, 3), (1, 2)]
    flat = [
        (head.process, row, at, size)
        for head, rows, ats, sizes in runs
        for row, at, size in zip(rows, ats, sizes, strict=True)
    ]
    assert flat == [(head.process, row, at, size) for head, row, at, size in scan(path, ReadStats())]
    assert [row.s for _h, row in iter_rows(path)] == [row.s for _h, row, _a, _s in flat[:-1]]  # (a repeat skipped)


def test_a_step_that_is_not_an_int_is_a_bad_line(tmp_path: Path) -> None:
    """An rl.step written as text, a boolean or a number with a fraction is the wrong JSON type: the line is
    skipped and counted, in a cold read and in goodput --json, which then lists only the int steps."""
    from lens_rl.offline import analyze

    good = span("step", 0, 1, "s0", step=0)
    lines = [
        good,
        span("step", 1, 2, "s1", step=1),
        {**span("step", 2, 3, "s2"), "a": {"rl.step": "2"}},
        {**span("step", 3, 4, "s3"), "a": {"rl.step": True}},
        {**span("step", 4, 5, "s4"), "a": {"rl.step": 4.0}},
        {**span("step", 5, 6, "s5"), "a": {"rl.step": [5]}},  # (a list reads as no step)
    ]
    path = write_process(tmp_path / "run", "driver", 0, 1, lines)
    stats = ReadStats()
    assert [row.s for _, row in iter_rows(path, stats)] == [good["s"], lines[1]["s"], lines[5]["s"]]
    assert stats.skipped == 3
    report = analyze(span_files(tmp_path / "run"), jobs=1)
    assert [s["step"] for s in report["steps"]] == [0, 1] and report["skipped_lines"] == 3
