"""The pipeline's memo on disk (``run/pipe_memo_file.py``): a look at a grown run takes the windows that ended
before what is new from it and computes the rest; a record planted, cut short, of another schema version,
claiming more than it holds or whose arrays do not add up is never used (said once where it is this user's), and
every answer is a cold read's."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import msgspec
import pytest

import lens_rl.offline.run.analyze as analyze_module
from lens_rl.offline.rollup.pipe_memo import PipeMemo
from lens_rl.offline.run import kept
from lens_rl.offline.run.analyze import analyze
from lens_rl.offline.run.cache import cache_folder
from lens_rl.offline.run.cache_files import MAX_RECORDS, after_length
from lens_rl.offline.run.pipe_memo_file import PIPE_MEMO, PipeMemoRec
from lens_rl.offline.run.record_codec import decode, encode
from lens_rl.store import span_files
from tests.stores import count_records, grow_store


def _look(run: Path, monkeypatch: Any) -> tuple[PipeMemo, dict[str, Any]]:
    """A look through the cache (no whole answer kept), the pipeline's memo it read, and its answer, checked
    against a cold read's."""
    folder = Path(cache_folder(run))
    for report in folder.glob("report-*.json"):
        report.unlink()
    read: list[PipeMemo] = []
    load = analyze_module.load_pipe_memo

    def loaded(*args: Any) -> tuple[PipeMemo, str | None]:
        memo, why = load(*args)
        read.append(memo)
        return memo, why

    monkeypatch.setattr(analyze_module, "load_pipe_memo", loaded)
    paths = span_files(run)
    warm = analyze(paths, jobs=1, cache=str(folder))
    monkeypatch.setattr(analyze_module, "load_pipe_memo", load)
    cold = json.loads(json.dumps(analyze(paths, jobs=1), default=str))
    assert json.dumps(warm, sort_keys=True) == json.dumps(cold, sort_keys=True)
    assert warm["pipeline"] is not None and len(read) == 1
    return read[0], warm


def test_a_grown_runs_look_takes_the_windows_that_ended_before_what_is_new(tmp_path: Path, monkeypatch: Any) -> None:
    """After a run grew by three steps, a look takes every earlier step's window from the memo (they ended
    before the new spans) and computes the three new ones; a late span of an old step takes the windows from
    it on afresh. Every answer is a cold read's."""
    from tests.stores import span

    run = tmp_path / "r"
    grow_store(run, 0, 30)
    memo, _ = _look(run, monkeypatch)
    assert memo.reused == 0 and memo.made is not None and len(memo.made[1]) == 30
    assert (Path(cache_folder(run)) / PIPE_MEMO).exists()
    grow_store(run, 30, 33)
    memo, _ = _look(run, monkeypatch)
    assert memo.reused == 30 and memo.made is not None and len(memo.made[1]) == 33
    late = span("train", 103.2, 105.4, "late-w4", parent="d10-1", remote=True, bucket="productive", step=10)
    with (run / "spans-lm_policy-4-104.jsonl").open("a") as handle:  # a late span of step 10
        handle.write(json.dumps(late) + "\n")
    memo, _ = _look(run, monkeypatch)
    assert memo.reused == 10  # (steps 0..9 ended before it)


#: a memo record whose first field's buffer claims 4 GiB
_CLAIMING_4_GIB = b"\x87\xa4type\xabpipe-memo/1\xa3key\xc6\xff\xff\xff\xff" + b"x" * 64


def test_a_look_where_one_process_alone_grew_equals_a_cold_read(tmp_path: Path, monkeypatch: Any) -> None:
    """Where only the driver wrote since the last look, the pools' unions of what is new are its busy time alone
    (one array under several keys, each with windows kept of its own): the earlier windows are taken as kept,
    and the answer is a cold read's."""
    from tests.stores import step_lines

    run = tmp_path / "r"
    grow_store(run, 0, 20)
    _look(run, monkeypatch)
    with (run / "spans-driver-0-1.jsonl").open("a") as handle:  # step 20's driver spans, no worker's
        for row in step_lines(20)["driver"]:
            handle.write(json.dumps(row) + "\n")
    memo, _ = _look(run, monkeypatch)
    assert memo.reused == 20


def _sealed(data: bytes) -> bytes:
    """``data`` sealed as this user's lens_rl seals it, framed as the memo's file holds a record."""
    body = kept.sealed(data)
    assert body is not None
    return after_length(body)


def _planted(rec: PipeMemoRec, **changes: Any) -> bytes:
    """``rec`` with ``changes``, as a record of the memo's file under this user's seal."""
    return _sealed(encode(msgspec.structs.replace(rec, **changes)))


def test_a_grown_runs_memo_is_appended_to_and_written_whole_again_after_many_records(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A look that took the earlier windows as kept appends only the windows it computed (one small sealed
    record), and the next look reads the file back to its state; a record cut short, or two looks that
    appended at once, leave the state before it (out of date: computed afresh, written whole); a file of many
    records is written whole again. Every answer is a cold read's."""
    run = tmp_path / "r"
    grow_store(run, 0, 30)
    _look(run, monkeypatch)
    memo_file = Path(cache_folder(run)) / PIPE_MEMO
    first = memo_file.read_bytes()
    grow_store(run, 30, 32)
    assert _look(run, monkeypatch)[0].reused == 30
    grown = memo_file.read_bytes()
    assert count_records(grown) == 2 and grown.startswith(first) and len(grown) - len(first) < len(first) // 2
    grow_store(run, 32, 33)
    assert _look(run, monkeypatch)[0].reused == 32  # (read back through the appended record)
    appended = memo_file.read_bytes()
    grow_store(run, 33, 34)
    memo_file.write_bytes(appended[:-5])  # (the last record cut short: the state before it is out of date)
    assert _look(run, monkeypatch)[0].reused == 0
    assert count_records(memo_file.read_bytes()) == 1
    for n in range(34, 34 + MAX_RECORDS):
        grow_store(run, n, n + 1)
        assert _look(run, monkeypatch)[0].reused == n
    assert count_records(memo_file.read_bytes()) < MAX_RECORDS


def test_a_memo_planted_cut_short_oversized_or_not_adding_up_is_computed_afresh(
    tmp_path: Path, monkeypatch: Any, caplog: Any
) -> None:
    """A memo record is never trusted: one planted (not under the user's seal) or cut short is read as none; one
    under the seal of another schema version, claiming 4 GiB, with a window's coverage missing or an array cut
    mid-item is one stderr line. Each time the coverage is computed afresh and the answer is a cold read's."""
    run = tmp_path / "r"
    grow_store(run, 0, 12)
    _look(run, monkeypatch)
    folder = Path(cache_folder(run))
    saved = tmp_path / "saved"
    shutil.copytree(folder, saved)
    good = (saved / PIPE_MEMO).read_bytes()
    body = kept.unsealed(good[8:])
    assert body is not None
    rec = decode(body, PipeMemoRec)
    other = msgspec.msgpack.decode(bytes(body))
    other["type"] = "pipe-memo/0"
    oversized = _sealed(_CLAIMING_4_GIB)
    variants: list[tuple[bytes, str | None]] = [
        (after_length(encode(rec)), None),  # planted: not sealed
        (good[:-9], None),  # cut short
        (_sealed(msgspec.msgpack.encode(other)), "corrupt (ValidationError)"),  # (its tag another version's)
        (oversized, "corrupt (DecodeError)"),
        (_planted(rec, covered=[*rec.covered[:-1], rec.covered[-1][:-8]]), "corrupt (arrays that do not add up)"),
        (_planted(rec, los=rec.los[:-3]), "corrupt (an array cut mid-item)"),
    ]
    caplog.set_level("WARNING", "lens_rl")
    assert _look(run, monkeypatch)[0].reused == 12  # (the memo as kept: every window taken)
    for data, said in variants:
        shutil.rmtree(folder)
        shutil.copytree(saved, folder)
        (folder / PIPE_MEMO).write_bytes(data)
        caplog.clear()
        memo, _ = _look(run, monkeypatch)
        lines = [r.getMessage() for r in caplog.records if "the pipeline's: " in r.getMessage()]
        assert memo.reused == 0 and memo.made is not None, said
        assert lines == [] if said is None else len(lines) == 1 and said in lines[0], (said, lines)


def test_a_memo_claiming_4_gib_allocates_next_to_nothing() -> None:
    """A memo record whose buffer claims 4 GiB is a DecodeError before anything is allocated."""
    import tracemalloc

    tracemalloc.start()
    try:
        with pytest.raises(msgspec.DecodeError):
            decode(_CLAIMING_4_GIB, PipeMemoRec)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak


def _grow_pipeline(run: Path, rnd: Any, first: int, held: list[dict[str, Any]]) -> int:
    """A few steps of an async pipeline appended (a driver's step umbrellas and weight syncs, two rollout and two
    trainer ranks at random times): some umbrellas written a look later than their children (``held``), and now
    and then a late rollout span of an old step; the next step returned."""
    from tests.stores import span

    lines: dict[str, list[dict[str, Any]]] = {name: [] for name in _RANKS}
    step = first
    for step in range(first, first + rnd.randint(1, 4)):
        t = step * 10.0 + rnd.random()
        for name in list(_RANKS)[1:]:
            a = t + rnd.uniform(0, 2) if name.startswith("rollout") else t + rnd.uniform(2, 5)
            phase = "generation" if name.startswith("rollout") else "policy_training"
            lines[name].append(
                span(
                    phase,
                    a,
                    a + rnd.uniform(0.5, 3),
                    f"{name}-{step}",
                    parent=f"s{step}",
                    remote=True,
                    bucket="productive",
                    step=step,
                )
            )
        if rnd.random() < 0.5:
            a = t + rnd.uniform(5, 8)
            lines["driver"].append(span("weight_sync", a, a + 0.5, f"w{step}", parent=f"s{step}", bucket="overhead"))
        umbrella = span("step", t, t + rnd.uniform(8, 9.5), f"s{step}", parent="job", step=step)
        (held if rnd.random() < 0.3 else lines["driver"]).append(umbrella)
    if held and rnd.random() < 0.6:
        lines["driver"].append(held.pop(0))
    if rnd.random() < 0.2 and step > 3:
        old = rnd.randrange(0, step - 2)
        lines["rollout-0"].append(
            span(
                "generation",
                old * 10.0 + 1,
                old * 10.0 + 1.3,
                f"late-{step}",
                parent=f"s{old}",
                remote=True,
                bucket="productive",
                step=old,
            )
        )
    for name, rows in lines.items():
        with (run / _file(name)).open("a") as handle:
            handle.writelines(json.dumps(row) + "\n" for row in rows)
    return step + 1


#: the pipeline's processes: name -> (group, rank, pid)
_RANKS = {
    "driver": ("driver", 0, 1),
    "rollout-0": ("rollout", 0, 2),
    "rollout-1": ("rollout", 1, 3),
    "trainer-0": ("trainer", 0, 4),
    "trainer-1": ("trainer", 1, 5),
}


def _file(name: str) -> str:
    group, rank, pid = _RANKS[name]
    return f"spans-{group}-{rank}-{pid}.jsonl"


def test_random_growing_pipelines_read_through_the_memo_as_cold_reads(tmp_path: Path, monkeypatch: Any) -> None:
    """Async pipelines of two pools that grow at random (weight syncs, umbrellas written after their children,
    late spans of old steps): after every growth the look through the memo equals a cold read, and the memo is
    used."""
    import random

    from tests.stores import header

    reused = 0
    for seed in range(8):
        rnd = random.Random(seed)
        run = tmp_path / f"r{seed}"
        run.mkdir()
        for name, (group, rank, pid) in _RANKS.items():
            extra = {"root": "job", "role": "driver"} if name == "driver" else {}
            (run / _file(name)).write_text(json.dumps(header(group, rank, pid, **extra)) + "\n")
        step, held = 0, list[dict[str, Any]]()
        for _ in range(8):
            step = _grow_pipeline(run, rnd, step, held)
            reused += _look(run, monkeypatch)[0].reused
    assert reused > 0


def test_a_rank_restarted_between_looks_keeps_its_windows_and_reads_as_a_cold_read(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A rollout rank restarted after a look (a new pid, the same group and rank) is the same rank to the memo:
    the earlier steps' windows (steps apart) are taken as kept, and the answer (one rank, busy 1.0) is a cold read's."""
    from tests.stores import span, write_process

    def step(k: int) -> dict[str, Any]:
        return span("step", 10 * k, 10 * k + 9, f"s{k}", step=k)

    def gen(k: int, pid: int) -> dict[str, Any]:
        return span("generation", 10 * k, 10 * k + 9, f"g{pid}-{k}", bucket="productive", step=k)

    run = tmp_path / "r"
    write_process(run, "driver", 0, 1, [step(k) for k in range(10)], root="job", role="driver")
    write_process(run, "rollout", 0, 2, [gen(k, 2) for k in range(10)])
    _look(run, monkeypatch)
    with (run / "spans-driver-0-1.jsonl").open("a") as handle:
        handle.writelines(json.dumps(step(k)) + "\n" for k in range(10, 15))
    write_process(run, "rollout", 0, 6, [gen(k, 6) for k in range(10, 15)])
    memo, warm = _look(run, monkeypatch)
    assert memo.reused == 10
    (pool,) = [p for p in warm["pipeline"]["pools"] if p["pool"] == "rollout"]
    assert pool["busy"] == 1.0 and [(r["rank"], r["pid"]) for r in pool["ranks"]] == [(0, 6)]
