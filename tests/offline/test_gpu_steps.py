"""The GPU join's kept steps (``gpu-steps.kept``): a look appends only the rows it settled since the last, the
file is written whole now and then, and a hostile file is one stderr line and a cold join, the answer a cold
read's byte for byte."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from lens_rl.offline.rollup.gpu_memo import Kept
from lens_rl.offline.run import gpu_lines, gpu_steps
from lens_rl.offline.run.cache_files import after_length, records_in
from lens_rl.offline.run.gpu_steps import VERSION, StepsRec, load_steps, save_steps
from tests.gpu_stores import harm_record
from tests.offline.test_gpu_lines import _grow, _look, _store


@pytest.fixture(autouse=True)
def _short_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu_lines, "WINDOW_NS", 3 * 10**9)  # (3 s: most of a 20 s store before the window)


def _records(path: Path) -> list[StepsRec]:
    data = path.read_bytes()
    return [msgspec.msgpack.decode(data[a:b], type=StepsRec) for a, b in records_in(data, 0)]


def _kept(run: Path) -> Path:
    return run / ".lens_rl-cache" / "gpu-steps.kept"


def test_a_look_appends_only_the_rows_it_settled_since(tmp_path: Path) -> None:
    """Each look after the first leaves the file's bytes as they were and appends one record holding only the
    rows settled since (from where the state before stopped); every answer is --no-cache's."""
    run = _store(tmp_path / "r1")
    _look(run)
    assert len(_records(_kept(run))) == 1
    for rounds, lo in enumerate((20, 30, 40), start=2):
        before = _kept(run).read_bytes()
        _grow(run, lo, lo + 10)
        assert _look(run) == _look(run, "--no-cache")
        after = _kept(run).read_bytes()
        assert after.startswith(before) and len(after) > len(before)
        records = _records(_kept(run))
        assert len(records) == rounds and records[-1].parent == records[-2].token
        assert records[-1].memos and all(m.productive.first > 0 for m in records[-1].memos)
    state = load_steps(str(run / ".lens_rl-cache"))
    assert state is not None and state.token == records[-1].token
    assert all(m.productive.first == 0 and m.productive.n >= 40 for m in state.memos.values())


def test_the_file_is_written_whole_after_its_most_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once the file holds its most records, the next look writes it whole (one record of every row), and the
    answers stay --no-cache's."""
    monkeypatch.setattr(gpu_steps, "MAX_RECORDS", 2)
    run = _store(tmp_path / "r1")
    _look(run)
    counts, states = [], []
    for lo in (20, 30):
        _grow(run, lo, lo + 10)
        assert _look(run) == _look(run, "--no-cache")
        counts.append(len(_records(_kept(run))))
        states.append(load_steps(str(run / ".lens_rl-cache")))
    assert counts == [2, 1]
    [whole] = _records(_kept(run))
    assert whole.parent == "" and all(m.steps.first == 0 == m.productive.first for m in whole.memos)
    # (the state read from a record and the one appended after it: the leading rows of the file written whole)
    joined = states[0]
    assert joined is not None and {m.key for m in whole.memos} == set(joined.memos)
    for memo in whole.memos:
        before = joined.memos[memo.key]
        for now, then in ((memo.steps, before.steps), (memo.productive, before.productive)):
            assert bytes(now.sums).startswith(bytes(then.sums)) and bytes(now.peaks).startswith(bytes(then.peaks))


def test_of_two_looks_appending_from_one_state_the_second_is_skipped(tmp_path: Path) -> None:
    """Two looks that read the same state and append after it: the first's record is applied, the second's
    (its parent no longer the file's state) is skipped."""
    run = _store(tmp_path / "r1")
    _look(run)
    cache = str(run / ".lens_rl-cache")
    state = load_steps(cache)
    assert state is not None
    # (each look's rows other than the state's: kept anew from row 0, in place of the state's)
    other = {
        k: msgspec.structs.replace(m, steps=msgspec.structs.replace(m.steps, digest="x"))
        for k, m in state.memos.items()
    }
    first = save_steps(cache, state, other)
    second = save_steps(cache, state, other)
    got = load_steps(cache)
    assert got is not None and first != second and got.token == first and got.disk[0] == 3


def test_windows_naming_another_state_of_the_steps_use_none_of_them(tmp_path: Path) -> None:
    """A kept steps file of another state than the windows name (an older copy put back): its rows are not
    used, nothing is said, and the answer is --no-cache's."""
    run = _store(tmp_path / "r1")
    _look(run)
    older = _kept(run).read_bytes()
    _grow(run, 20, 30)
    _look(run)
    _kept(run).write_bytes(older)
    _grow(run, 30, 40)
    assert _look(run) == _look(run, "--no-cache")


def _harmed(run: Path, harm: str) -> None:
    """The kept steps harmed as ``harm`` says (after a look that appended to them)."""
    path = _kept(run)
    records = _records(path)
    base, last = records[0], records[-1]
    if harm == "version":
        path.write_bytes(after_length(msgspec.msgpack.encode(msgspec.structs.replace(base, version=VERSION + 1))))
    elif harm == "steps":  # (a process's kept sums cut mid-item: read as floats they would not be)
        memo = base.memos[0]
        cut = msgspec.structs.replace(memo.steps, sums=bytes(memo.steps.sums)[:-3])
        memos = [msgspec.structs.replace(memo, steps=cut), *base.memos[1:]]
        path.write_bytes(after_length(msgspec.msgpack.encode(msgspec.structs.replace(base, memos=memos))))
    elif harm == "cut-delta":  # (a look killed while appending)
        data = path.read_bytes()
        path.write_bytes(data[:-5])
    elif harm == "unfollowed":  # (rows from past where the state stops)
        memo = last.memos[0]
        gap = Kept(memo.productive.n + 1, "x", memo.productive.columns, memoryview(b""), memoryview(b""))
        gap = msgspec.structs.replace(gap, first=memo.productive.n + 1)
        rec = StepsRec(last.key, VERSION, last.token, "t", [msgspec.structs.replace(memo, productive=gap)])
        with path.open("ab") as handle:
            handle.write(after_length(msgspec.msgpack.encode(rec)))


@pytest.mark.parametrize("harm", ["planted", "cut", "oversized", "fifo", "version", "steps", "cut-delta", "unfollowed"])
def test_a_hostile_kept_steps_file_is_one_stderr_line_and_a_cold_join(
    tmp_path: Path, harm: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Kept steps of another shape, cut short (whole or their last record), oversized, of another layout
    version, whose arrays do not add up or whose rows do not follow the state before them, or a FIFO in their
    place (never opened: it would block): one warning (a line on stderr), and the answer is --no-cache's."""
    run = _store(tmp_path / "r1")
    _look(run)
    _grow(run, 20, 30)
    _look(run)
    planted: dict[str, Any] = {"key": "x", "memos": [[1, 2, 3]], "v": b"\0" * 99}
    if not harm_record(_kept(run), harm, planted, gpu_steps.MAX_BYTES):
        _harmed(run, harm)
    _grow(run, 30, 40)
    caplog.clear()
    got = _look(run)
    said = [r for r in caplog.records if "GPU join's kept steps" in r.getMessage()]
    assert got == _look(run, "--no-cache")
    assert len(said) == 1, said


@pytest.mark.parametrize("most", [32, 1])
def test_a_look_that_settled_nothing_new_writes_nothing(
    tmp_path: Path, most: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where no process settled a row since the state read, the file is left as it is (no record appended,
    nor written whole where it holds its most records) and that state is the one named for the next look."""
    monkeypatch.setattr(gpu_steps, "MAX_RECORDS", most)
    run = _store(tmp_path / "r1")
    _look(run)
    cache = str(run / ".lens_rl-cache")
    state = load_steps(cache)
    before = _kept(run).read_bytes()
    assert state is not None and save_steps(cache, state, state.memos) == state.token
    assert _kept(run).read_bytes() == before
