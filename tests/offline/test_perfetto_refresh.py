"""Perfetto through the refresh cache: a second look reads only what is new, and writes the very bytes a cold read writes."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path
from typing import Any

import pytest

from lens_rl.offline.run import kept
from lens_rl.offline.run.cache import cache_folder
from lens_rl.offline.show.perfetto import refresh, write_trace
from lens_rl.store import span_files
from tests.conftest import lens
from tests.stores import grow_store, header, span, step_lines, twin_ids_store


@pytest.fixture(autouse=True)
def _own_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """Entries sealed with a key of this test's own (the user's key file is not touched)."""
    monkeypatch.setattr(kept, "_KEY", os.urandom(32))


def _same(run: Path, out: Path, *, jobs: int = 1, **options: Any) -> bytes:
    """The trace through the cache, checked byte for byte against a cold read's; its bytes."""
    cold, warm = out.with_name("cold" + out.suffix), out
    write_trace(span_files(run), cold, jobs=jobs, **options)
    write_trace(span_files(run), warm, jobs=jobs, cache=cache_folder(run), **options)
    assert warm.read_bytes() == cold.read_bytes()
    return warm.read_bytes()


@pytest.mark.parametrize("name", ["t.json", "t.pftrace"])
def test_an_unchanged_store_is_not_read_again_and_writes_the_cold_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """A second look at an unchanged store reads no span line (the kept events are the answer) and writes
    the cold read's bytes, serially and with --jobs 2."""
    run = tmp_path / "r"
    grow_store(run, 0, 12)
    _same(run, tmp_path / name)

    def no_read(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a span file read again")

    with monkeypatch.context() as patched:
        patched.setattr(refresh, "read_rows", no_read)
        _same(run, tmp_path / name)
    _same(run, tmp_path / name, jobs=2)


@pytest.mark.parametrize("name", ["t.json", "t.pftrace"])
def test_a_grown_file_is_read_from_where_the_last_look_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """Lines appended between two looks (whole steps; then a child before the parent a later append writes,
    which a protobuf's lanes draw again whole) are read from where the last look stopped, and the trace is a
    cold read's every time."""
    from lens_rl.offline.show.perfetto import chrome, proto

    monkeypatch.setattr(proto, "SLICE", 7)  # (events handed on in pieces of 7: a piece's end is no event's)
    monkeypatch.setattr(chrome, "SLICE", 7)
    run = tmp_path / "r"
    grow_store(run, 0, 10)
    _same(run, tmp_path / name)
    starts: list[int] = []
    read_rows = refresh.read_rows

    def counted(path: Any, stop: int, start: int = 0, *args: Any, **kwargs: Any) -> Any:
        starts.append(start)
        return read_rows(path, stop, start, *args, **kwargs)

    monkeypatch.setattr(refresh, "read_rows", counted)
    grow_store(run, 10, 12)
    _same(run, tmp_path / name)
    assert starts and all(start > 0 for start in starts)
    lines = step_lines(12)
    worker = run / "spans-lm_policy-0-100.jsonl"
    with worker.open("a") as handle:  # the barrier, whose parent (the worker's phase) is written later
        handle.write(json.dumps(lines["w0"][0]) + "\n")
    _same(run, tmp_path / name)
    with worker.open("a") as handle:
        handle.write(json.dumps(lines["w0"][1]) + "\n")
        handle.write(json.dumps(lines["w0"][0]) + "\n")  # (a repeated line: skipped, as a cold read skips it)
    _same(run, tmp_path / name)


@pytest.mark.parametrize("name", ["t.json", "t.pftrace"])
def test_a_window_a_group_a_new_file_and_a_protobuf_through_the_cache_are_the_cold_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """--steps A-B, --group G, -o X.pftrace: a grown store and a new process file added give the cold read's
    bytes."""
    from lens_rl.offline.show.perfetto import chrome, proto

    monkeypatch.setattr(proto, "SLICE", 7)  # (events handed on in pieces of 7: a piece's end is no event's)
    monkeypatch.setattr(chrome, "SLICE", 7)
    run = tmp_path / "r"
    grow_store(run, 0, 10)
    for options in ({"steps": (3, 12)}, {"group": "lm_policy"}, {}):
        _same(run, tmp_path / name, **options)
    grow_store(run, 10, 13)
    extra = run / "spans-lm_ref-0-300.jsonl"
    extra.write_text(
        json.dumps(header("lm_ref", 0, 300))
        + "\n"
        + json.dumps(span("ref_logprob", 1.0, 2.0, "x1", parent="d1-0", remote=True, bucket="productive", step=1))
        + "\n"
    )
    for options in ({"steps": (3, 12)}, {"group": "lm_policy"}, {}):
        _same(run, tmp_path / name, **options)


def test_an_entry_of_another_version_cut_short_or_planted_is_one_line_and_a_cold_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Entries of another lens_rl version, cut short, of garbage, or a planted pickle that would run code:
    each ignored, said in one line, the trace a cold read's, the planted code never run."""
    from lens_rl.offline.run import perfetto_cache

    run = tmp_path / "r"
    grow_store(run, 0, 8)
    with monkeypatch.context() as patched:
        patched.setattr(perfetto_cache, "__version__", "0.0.0-other")
        _same(run, tmp_path / "t.json")
    folder = Path(cache_folder(run))
    cut = folder / "spans-lm_policy-1-101.jsonl.perfetto-json"
    cut.write_bytes(cut.read_bytes()[:-100])
    (folder / "spans-lm_policy-2-102.jsonl.perfetto-json").write_bytes(b"\xc1garbage")
    marker = tmp_path / "planted"

    class Planted:
        def __reduce__(self) -> Any:
            return (os.system, (f"touch {marker}",))

    (folder / "spans-lm_policy-3-103.jsonl.perfetto-json").write_bytes(pickle.dumps(Planted()))
    caplog.set_level("WARNING", "lens_rl")
    _same(run, tmp_path / "t.json")
    assert not marker.exists()
    (line,) = [r.getMessage() for r in caplog.records if "cache file(s) not used" in r.getMessage()]
    assert "10 cache file(s) not used" in line  # 7 of another version, the cut, the garbage, the pickle
    caplog.clear()
    _same(run, tmp_path / "t.json")
    assert not [r for r in caplog.records if "cache file(s) not used" in r.getMessage()]


@pytest.mark.slow
def test_the_cli_reads_through_the_cache_and_no_cache_reads_cold(tmp_path: Path) -> None:
    """lens-rl perfetto keeps its entries in the run's cache folder and writes the same bytes as --no-cache,
    which keeps none."""
    run = tmp_path / "traces" / "r"
    grow_store(run, 0, 10)
    cold = lens("perfetto", str(run), "-o", str(tmp_path / "cold.json"), "--no-cache")
    assert cold.returncode == 0, cold.stderr[-2000:]
    assert not list(run.glob(".lens_rl-cache/*.perfetto-*"))
    for _ in range(2):
        warm = lens("perfetto", str(run), "-o", str(tmp_path / "warm.json"))
        assert warm.returncode == 0, warm.stderr[-2000:]
        assert (tmp_path / "warm.json").read_bytes() == (tmp_path / "cold.json").read_bytes()
        assert list(run.glob(".lens_rl-cache/*.perfetto-json"))


def test_a_resumed_run_needs_no_line_read_again_on_a_second_look(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A driver restarted under its pid appends a header of another attempt to its file (so its processes
    are taken from every line): a look after it grew, and one more of the unchanged store, are the cold
    trace, and the last reads no span line (its first looks and events both kept)."""
    from lens_rl.offline.run import perfetto_scans

    run = tmp_path / "r"
    grow_store(run, 0, 6)
    _same(run, tmp_path / "t.json")
    driver = run / "spans-driver-0-1.jsonl"
    with driver.open("a") as handle:
        handle.write(json.dumps(header("driver", 0, 1, root="job", role="driver", **{"rl.attempt": 1})) + "\n")
    grow_store(run, 6, 9)
    for name in ("t.json", "t.pftrace"):
        _same(run, tmp_path / name)

    def no_read(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a span file read again")

    monkeypatch.setattr(refresh, "read_rows", no_read)
    monkeypatch.setattr(perfetto_scans, "read_rows", no_read)
    monkeypatch.setattr(perfetto_scans, "scan_file", no_read)
    for name in ("t.json", "t.pftrace"):
        _same(run, tmp_path / name)


def test_an_events_bytes_are_its_own_whatever_its_attributes_nest() -> None:
    """Events are written a line each, the same bytes in any batch, also where an attribute nests an object
    beginning as an event does or holds an integer past 64 bits (what lets a grown file's events append)."""
    from lens_rl.offline.show.perfetto.chrome import event_lines
    from lens_rl.offline.show.perfetto.places import dumps

    events = [
        {"ph": "X", "name": "a", "args": {"k": [{}, {"ph": 1}], "s": ',{"ph":'}},
        {"ph": "X", "name": "b", "args": {"big": 2**70}},
        {"ph": "M", "name": "c", "args": {}},
    ]
    alone = b"".join(dumps(e) + b",\n" for e in events)
    assert event_lines(events) == alone
    assert event_lines(events[:1]) + event_lines(events[1:]) == alone
    assert event_lines([events[0], events[2]]) == dumps(events[0]) + b",\n" + dumps(events[2]) + b",\n"
    assert json.loads(b"[" + alone[:-2] + b"]")[1]["args"]["big"] == 2**70


def test_callers_in_another_worker_are_located_once_and_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A call from one worker's phase into another process (its caller neither a driver's span nor a client)
    is drawn as a cold read draws it; a second look at the unchanged store locates it without reading a file."""
    from lens_rl.offline.run import perfetto_cache

    run = tmp_path / "r"
    grow_store(run, 0, 4)
    (run / "spans-lm_ref-0-300.jsonl").write_text(
        json.dumps(header("lm_ref", 0, 300))
        + "\n"
        + json.dumps(span("ref_logprob", 12.0, 12.5, "x1", parent="p0-1", remote=True, bucket="productive"))
        + "\n"
    )
    data = _same(run, tmp_path / "t.json")
    assert b'"ph":"s"' in data and list(run.glob(".lens_rl-cache/*.perfetto-where"))

    def no_read(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a span file read again")

    monkeypatch.setattr(perfetto_cache, "locate_file", no_read)
    assert _same(run, tmp_path / "t.json") == data


@pytest.mark.parametrize("first", ["lower", "upper"])
def test_an_upper_case_twin_of_a_span_id_is_drawn_through_the_cache_as_cold(tmp_path: Path, first: str) -> None:
    """A span id and its upper-case twin in one file, the twin appended after a look: both spans are drawn,
    through the cache as by a cold read (the drawn ids made a number of both, and the twin was skipped)."""
    run = tmp_path / "r"
    append_twin = twin_ids_store(run, first)
    _same(run, tmp_path / "t.json")
    append_twin()
    events = json.loads(_same(run, tmp_path / "t.json"))
    events = events["traceEvents"] if isinstance(events, dict) else events
    assert sorted(e["name"] for e in events if e.get("ph") == "X") == ["gen", "train"]
