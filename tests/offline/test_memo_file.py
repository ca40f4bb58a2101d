"""The critical path's memo on disk (``run/memo_file.py``): a look that walked a few steps appends them, a
limited look drops what it no longer holds true, two looks at once and a record cut short leave the state
before them, and a memo of many records is written whole again; every answer is a cold read's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lens_rl.offline.run.analyze import analyze
from lens_rl.offline.run.cache import cache_folder
from lens_rl.store import span_files
from tests.stores import count_records, grow_store, span


def test_a_grown_runs_memo_is_appended_to_and_reads_back_as_the_last_looks(tmp_path: Path) -> None:
    """A look that walked a few steps appends them to the critical path's memo (one sealed record, not the
    memo rewritten); a look limited to some steps drops the records it no longer holds true, so a later look
    reuses none of them; two looks that appended at once, or a record cut short, leave the state before it;
    a memo of many records is written whole again. Every answer is a cold read's."""
    import lens_rl.offline.rollup.critical as critical
    from lens_rl.offline.run.cache_files import MAX_RECORDS

    run = tmp_path / "r"
    grow_store(run, 0, 30)
    memo_file = Path(cache_folder(run)) / "critical-memo.msgpack"

    def look(steps: tuple[int, int] | None = None) -> int:
        for report in memo_file.parent.glob("report-*.json"):
            report.unlink()
        paths = span_files(run)
        before = critical._walked
        walked: list[int] = []
        critical._walked = lambda *a: walked.append(1) or before(*a)  # type: ignore[assignment]
        try:
            warm = analyze(paths, jobs=1, cache=cache_folder(run), steps=steps)
        finally:
            critical._walked = before  # type: ignore[assignment]
        cold = json.loads(json.dumps(analyze(paths, jobs=1, steps=steps), default=str))
        assert json.dumps(warm, sort_keys=True) == json.dumps(cold, sort_keys=True)
        return len(walked)

    assert look() == 30
    first = memo_file.read_bytes()
    grow_store(run, 30, 33)
    assert look() == 3
    grown = memo_file.read_bytes()
    assert count_records(first) == 1 and count_records(grown) == 2
    assert grown.startswith(first) and len(grown) - len(first) < len(first) // 2  # (appended: 3 steps' records)
    late = span("train", 103.2, 105.4, "late-w4", parent="d10-1", remote=True, bucket="productive", step=10)
    with (run / "spans-lm_policy-4-104.jsonl").open("a") as handle:  # a late span of step 10
        handle.write(json.dumps(late) + "\n")
    assert look((20, 32)) == 13  # (its steps from 10 on walked: 20..32 in the look; 0..19 are not true now)
    assert look() == 20  # (a look of every step: 0..19 walked again, none of their earlier records reused)
    saved = memo_file.read_bytes()
    grow_store(run, 33, 36)
    assert look() == 3
    memo_file.write_bytes(saved + memo_file.read_bytes()[len(saved) :][:-5])  # the last record, cut short
    assert look() == 36  # (the state before it was made from other entries: walked afresh, written whole)
    assert count_records(memo_file.read_bytes()) == 1
    for n in range(36, 36 + MAX_RECORDS):
        grow_store(run, n, n + 1)
        assert look() == 1
    assert count_records(memo_file.read_bytes()) < MAX_RECORDS  # written whole again on the way, not 32 records on
    assert look() == 0


def test_a_memo_whose_packed_stretches_do_not_add_up_is_walked_afresh_and_said_once(
    tmp_path: Path, caplog: Any
) -> None:
    """A step's stretches are kept packed (int64 pairs: a buffer to decode, not an int each); a memo record
    under the user's seal whose packed stretches are not whole pairs is one stderr line and every step walked
    afresh, the answer a cold read's."""
    import lens_rl.offline.rollup.critical as critical
    from lens_rl.offline.run import kept
    from lens_rl.offline.run.records import MemoRec, decode, encode

    run = tmp_path / "r"
    grow_store(run, 0, 12)
    folder = Path(cache_folder(run))
    paths = span_files(run)
    analyze(paths, jobs=1, cache=str(folder))
    memo_file = folder / "critical-memo.msgpack"
    body = kept.unsealed(memo_file.read_bytes()[8:])
    assert body is not None
    memo = decode(body, MemoRec)
    assert all(type(r[4]) is bytes and len(r[4]) % 16 == 0 for r in memo.records)  # (packed, whole pairs)
    memo.records[3][4] = memo.records[3][4][:-3]  # (cut mid-number)
    sealed = kept.sealed(encode(memo))
    assert sealed is not None
    memo_file.write_bytes(len(sealed).to_bytes(8, "little") + sealed)
    for report in folder.glob("report-*.json"):
        report.unlink()
    walked: list[int] = []
    before = critical._walked
    critical._walked = lambda *a: walked.append(1) or before(*a)  # type: ignore[assignment]
    caplog.set_level("WARNING", "lens_rl")
    try:
        warm = analyze(paths, jobs=1, cache=str(folder))
    finally:
        critical._walked = before  # type: ignore[assignment]
    cold = json.loads(json.dumps(analyze(paths, jobs=1), default=str))
    assert json.dumps(warm, sort_keys=True) == json.dumps(cold, sort_keys=True) and len(walked) == 12
    said = [r.getMessage() for r in caplog.records if "(the critical path's: " in r.getMessage()]
    assert len(said) == 1 and "corrupt (ValueError)" in said[0], said
