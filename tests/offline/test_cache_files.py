"""The refresh cache on disk: where it lives (the run folder, else the user's cache directory for a read-only
one), an entry read back only by its own lens_rl and file, whole reports kept per store and replaced when the
store changes, and writes that fail quietly where nothing can be written."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from lens_rl.offline.run.analyze import analyze
from lens_rl.offline.run.cache_files import (
    CACHE_DIR,
    FORMAT,
    Entry,
    cache_folder,
    load_entry,
    options_key,
    save_entry,
)
from lens_rl.offline.run.kept import load_report, save_report, store_fingerprint
from lens_rl.store import span_files
from tests.stores import grow_store


def same_as_cold(run: Path) -> dict[str, Any]:
    """The report through the cache for ``run``, asserted equal to a cold read's."""
    paths = span_files(run)
    warm = analyze(paths, jobs=1, cache=cache_folder(run))
    cold = json.loads(json.dumps(analyze(paths, jobs=1), default=str))
    assert json.dumps(warm, sort_keys=True) == json.dumps(cold, sort_keys=True)
    return warm


def test_the_cache_lives_in_the_run_folder(tmp_path: Path) -> None:
    """A writable run folder holds its own cache, ``<run>/.lens_rl-cache``."""
    run = tmp_path / "r"
    run.mkdir()
    assert cache_folder(run) == str((run / CACHE_DIR).resolve()) and (run / CACHE_DIR).is_dir()


def test_a_read_only_run_folder_caches_in_the_users_cache_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the run folder cannot be written, the cache goes to $XDG_CACHE_HOME/lens_rl/<run>; the answer is the same."""
    if os.geteuid() == 0:
        pytest.skip("root writes a read-only folder anyway")
    run = tmp_path / "r"
    grow_store(run, 0, 10)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home-cache"))
    run.chmod(0o555)
    try:
        folder = cache_folder(run)
        assert folder.startswith(str(tmp_path / "home-cache" / "lens_rl"))
        same_as_cold(run)
    finally:
        run.chmod(0o755)


def test_a_read_only_run_folder_as_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same where the folder is on a read-only mount (as root: a bind mount; skipped where none can be made)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount")
    run = tmp_path / "r"
    grow_store(run, 0, 10)
    view = tmp_path / "view"
    view.mkdir()
    if os.system(f"mount --bind {run} {view} 2>/dev/null && mount -o remount,bind,ro {view} 2>/dev/null") != 0:
        os.system(f"umount {view} 2>/dev/null")
        pytest.skip("no bind mount here")
    try:
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home-cache"))
        assert cache_folder(view).startswith(str(tmp_path / "home-cache" / "lens_rl"))
        same_as_cold(view)
    finally:
        os.system(f"umount {view}")


def test_an_entry_is_read_back_only_by_its_own_version_and_file(tmp_path: Path) -> None:
    """An entry comes back for the same options and file; another version's says so; another file's (same
    name, another inode or first line) is quietly not used; a missing one is no error."""
    key = options_key((True, {}, True))
    entry = Entry(key, (1, 2, "abc"))
    entry.end = entry.size = 42
    path = tmp_path / "spans-driver-0-1.jsonl.cache"
    save_entry(path, entry)
    back, why = load_entry(path, key, (1, 2, "abc"))
    assert why is None and back is not None and back.end == 42
    assert load_entry(path, key, (1, 3, "abc")) == (None, None)
    assert load_entry(path, options_key((False, {}, True)), (1, 2, "abc")) == (None, None)  # other options
    other = key.replace(repr(__import__("lens_rl").__version__), "'0.0.0-other'", 1)
    save_entry(path, Entry(other, (1, 2, "abc")))  # what an older lens_rl left
    assert load_entry(path, key, (1, 2, "abc")) == (None, "of another lens_rl version")
    assert load_entry(tmp_path / "none.cache", key, (1, 2, "abc")) == (None, None)
    path.write_bytes(b"something else")
    assert load_entry(path, key, (1, 2, "abc")) == (None, "not a lens_rl cache")


def _kept(tmp_path: Path) -> tuple[Path, str, str, dict[str, Any]]:
    """A three-step store whose report was kept and reads back: (run, cache folder, fingerprint, report)."""
    run = tmp_path / "r"
    grow_store(run, 0, 3)
    folder = cache_folder(run)
    fingerprint = store_fingerprint(span_files(run), ("options",))
    report = analyze(span_files(run), jobs=1)
    save_report(folder, fingerprint, report)
    assert load_report(folder, fingerprint) == (report, None)
    return run, folder, fingerprint, dict(report)


def test_a_kept_report_follows_its_store(tmp_path: Path) -> None:
    """The report kept for a store comes back while the store is unchanged; a grown store has another
    fingerprint; one report per folder (the older one replaced)."""
    run, folder, first, report = _kept(tmp_path)
    assert store_fingerprint(span_files(run), ("other options",)) != first
    grow_store(run, 3, 4)
    second = store_fingerprint(span_files(run), ("options",))
    assert second != first and load_report(folder, second) == (None, None)  # (none kept for it: nothing said)
    save_report(folder, second, {"schema": "lens_rl.goodput/1"})
    assert [p.name for p in Path(folder).glob("report-*.json")] == [f"report-{second}.json"]


def test_a_kept_answer_not_sealed_by_this_user_is_not_trusted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kept report or page is used only when this user's lens_rl sealed it: one planted under its name
    (unsealed, sealed with another key, or a FIFO) is no answer, and the store is read again."""
    from lens_rl.offline.run import kept

    _, folder, fingerprint, report = _kept(tmp_path)
    target = Path(folder) / f"report-{fingerprint}.json"
    planted = json.dumps({"schema": "lens_rl.goodput/1", "goodput": 0.5}).encode()
    for content in (planted, b"0" * 64 + b"\n" + planted, target.read_bytes().replace(b"goodput", b"g00dput")):
        target.write_bytes(content)
        answer, why = load_report(folder, fingerprint)
        assert answer is None and why is not None and target.name in why  # (said on stderr: a line in all)
    kept.save_page(folder, fingerprint, "<html>ours</html>")
    assert kept.load_page(folder, fingerprint) == ("<html>ours</html>", None)
    page = Path(folder) / f"page-{fingerprint}.html"
    page.write_bytes(b"<script>theirs()</script>")
    assert kept.load_page(folder, fingerprint) == (None, f"{page.name}: not sealed by this user's lens_rl")
    page.unlink()
    os.mkfifo(page)
    answer, why = kept.load_page(folder, fingerprint)  # a FIFO planted under its name blocks nothing
    assert answer is None and why is not None and "unreadable" in why
    monkeypatch.setattr(kept, "_KEY", os.urandom(32))  # another user's key: our answers are not theirs
    save_report(folder, fingerprint, report)
    monkeypatch.setattr(kept, "_KEY", os.urandom(32))
    assert load_report(folder, fingerprint)[0] is None


def test_without_a_private_key_nothing_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A key file that others may read is not a secret: no answer is sealed, so none is kept or used."""
    from lens_rl.offline.run import kept

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home-cache"))
    monkeypatch.setattr(kept, "_KEY", None)
    key = tmp_path / "home-cache" / "lens_rl" / "answers.key"
    assert kept.sealed(b"x") is not None and key.stat().st_mode & 0o777 == 0o600
    monkeypatch.setattr(kept, "_KEY", None)
    key.chmod(0o644)
    assert kept.sealed(b"x") is None and kept.unsealed(b"seal\nx") is None


def test_writes_where_nothing_can_be_written_fail_quietly(tmp_path: Path) -> None:
    """A cache folder that is gone: saving an entry or a report raises nothing, and nothing is kept."""
    gone = tmp_path / "gone"
    save_entry(gone / "x.cache", Entry("k", ()))
    save_report(str(gone), "f", {"schema": "s"})
    assert not gone.exists()


def _plain(value: Any) -> Any:
    """``value`` with every container and number tagged by its type, so == compares types too
    (``1 == 1.0``, ``[1] != (1,)`` and a NaN that JSON writes as null all show)."""
    if isinstance(value, dict):
        return ("dict", [(type(k).__name__, k, _plain(v)) for k, v in value.items()])
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [_plain(v) for v in value])
    return (type(value).__name__, repr(value))


@pytest.mark.parametrize("options", [{}, {"warmup_steps": 1}, {"steps": (1, 2)}])
def test_a_report_read_from_the_cache_is_the_report_a_cold_read_returns(tmp_path: Path, options: Any) -> None:
    """The report a look keeps is not read back when it is written, so it must be plain JSON as built: a
    second look at an unchanged store (the report read from the cache) returns it key for key, type for
    type, on stores with attempts, throughput and MFU, unknown devices and stragglers."""
    from tests.offline import test_attempts, test_throughput
    from tests.stores import synthesized_store

    runs = [
        test_attempts._store(tmp_path / "attempts"),
        test_throughput._store(tmp_path / "mfu"),
        test_throughput._store(tmp_path / "unknown", known=False),
        synthesized_store(tmp_path / "synthesized", 4_000, 6),
    ]
    for run in runs:
        paths = span_files(run)
        built = analyze(paths, cache=cache_folder(run), **options)
        assert list(Path(cache_folder(run)).glob("report-*.json"))  # kept
        assert _plain(analyze(paths, cache=cache_folder(run), **options)) == _plain(built)
        assert _plain(json.loads(json.dumps(built))) == _plain(built)


def _entry_file(tmp_path: Path) -> tuple[Path, str, tuple[int, int, str], bytes]:
    """A real entry file (a 20-step store read through the cache): its path, options key, identity, bytes."""
    run = tmp_path / "r"
    grow_store(run, 0, 20)
    same_as_cold(run)
    path = next(Path(cache_folder(run)).glob("spans-driver*.cache"))
    key = options_key((True, {}, True))
    rec = _first_record(path.read_bytes())
    return path, key, tuple(rec.identity), path.read_bytes()  # type: ignore[return-value]


def _first_record(data: bytes) -> Any:
    from lens_rl.offline.run.records import EntryRec, decode

    at = len(FORMAT) + 1
    length = int.from_bytes(data[at : at + 8], "little")
    return decode(data[at + 8 : at + 8 + length], EntryRec)


def _with_first(data: bytes, record: bytes) -> bytes:
    """An entry file's bytes with its first record replaced by ``record`` (the rest dropped)."""
    return FORMAT.encode() + b"\n" + len(record).to_bytes(8, "little") + record


def test_a_planted_record_claiming_4_gib_is_refused_before_anything_is_allocated(tmp_path: Path) -> None:
    """A well-framed MessagePack record whose array (bytes, or a list of parts) claims 4 GiB is refused as
    corrupt with the entry's memory bounded by the record's size: a cold read, nothing allocated past it."""
    import tracemalloc

    import msgspec

    from lens_rl.offline.run.records import encode

    path, key, identity, data = _entry_file(tmp_path)
    first = _first_record(data)
    state = msgspec.structs.replace(first.state, held=memoryview(b"HELDHELD"))
    rec = msgspec.structs.replace(first, state=state, settled=[])
    plain = encode(rec)
    assert b"\xc4\x08HELDHELD" in plain and plain.count(b"\x90") >= 1
    planted = [
        plain.replace(b"\xc4\x08HELDHELD", b"\xc6\xff\xff\xff\xffHELDHELD"),  # bin 32: 4 GiB of bytes
        plain.replace(b"\x90", b"\xdd\xff\xff\xff\xff", 1),  # array 32: 4 G parts
    ]
    for record in planted:
        path.write_bytes(_with_first(data, record))
        tracemalloc.start()
        try:
            back, why = load_entry(path, key, identity)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert back is None and why is not None and why.startswith("corrupt"), why
        assert peak < 64 * len(data) + (1 << 20), peak


def test_a_record_cut_short_of_another_version_or_not_adding_up_is_read_cold(tmp_path: Path) -> None:
    """A first record cut short, one of another schema version (its tag), one whose step columns or held
    lines do not add up: each is corrupt (never trusted, one line); a delta cut short leaves the state before
    it (the next look appends nothing to it)."""
    import msgspec

    from lens_rl.offline.run.records import VERSION, encode

    path, key, identity, data = _entry_file(tmp_path)
    rec = _first_record(data)
    whole = encode(rec)
    path.write_bytes(_with_first(data, whole)[:-5])
    assert load_entry(path, key, identity)[1] == "corrupt (ValueError)"  # (its length past the file's end)
    other = whole.replace(f"entry/{VERSION}".encode(), f"entry/{VERSION + 1}".encode(), 1)
    path.write_bytes(_with_first(data, other))
    assert load_entry(path, key, identity)[1] == "corrupt (ValidationError)"
    part = next(p for p in rec.settled if len(p.steps.ns))
    steps = msgspec.structs.replace(part.steps, ns=memoryview(bytes(part.steps.ns)[:-8]))
    short = msgspec.structs.replace(rec, settled=[msgspec.structs.replace(part, steps=steps)])
    path.write_bytes(_with_first(data, encode(short)))
    assert load_entry(path, key, identity)[1] == "corrupt (ValueError)"
    odd = msgspec.structs.replace(rec, state=msgspec.structs.replace(rec.state, held=memoryview(bytes(24 + 8))))
    path.write_bytes(_with_first(data, encode(odd)))
    assert load_entry(path, key, identity)[1] == "corrupt (ValueError)"
    path.write_bytes(_with_first(data, whole) + (1000).to_bytes(8, "little") + b"\x9d")  # a delta cut short
    back, why = load_entry(path, key, identity)
    assert why is None and back is not None and back.token == rec.state.token and back.disk is None


def test_a_repeated_span_among_ids_of_several_types_is_a_repeat_through_the_cache(tmp_path: Path) -> None:
    """A file whose span ids mix text and numbers, grown by a repeat of one of them (an at-least-once resend):
    the look through the cache counts it once, as a cold read does (the settled ids' order holds across types)."""
    from tests.stores import header, span

    run = tmp_path / "r"
    run.mkdir()
    path = run / "spans-w-0-5.jsonl"

    def lines(ids: list[Any]) -> str:
        rows = []
        for i, span_id in enumerate(ids):
            row = span("n", i, i + 0.5, "x", step=1, bucket="productive")
            row["s"] = span_id
            rows.append(json.dumps(row) + "\n")
        return "".join(rows)

    path.write_text(json.dumps(header("w", 0, 5)) + "\n" + lines(["z", 1, 9, 5]))
    same_as_cold(run)
    with path.open("a") as handle:
        handle.write(lines([5]))
    assert same_as_cold(run)["job"]["seconds"]["productive"] == pytest.approx(2.0)


def test_a_damaged_kept_report_costs_one_line_and_the_look_reads_the_store(tmp_path: Path) -> None:
    """goodput on an unchanged store whose kept report was damaged: the same answer, read from the store, and
    one line on stderr naming the file; the next look uses the report it kept again, silently."""
    from tests.conftest import lens

    run = tmp_path / "r"
    grow_store(run, 0, 3)
    first = lens("goodput", str(run), "--json")
    (report,) = Path(cache_folder(run)).glob("report-*.json")
    report.write_bytes(b"garbage")
    again = lens("goodput", str(run), "--json")
    assert again.returncode == 0 and json.loads(again.stdout) == json.loads(first.stdout)
    (line,) = again.stderr.strip().splitlines()
    assert "1 cache file(s) not used" in line and report.name in line
    third = lens("goodput", str(run), "--json")
    assert third.stderr == "" and third.stdout == first.stdout


@pytest.mark.parametrize("first", ["lower", "upper"])
def test_an_upper_case_twin_of_a_span_id_is_another_span_through_the_cache_as_cold(tmp_path: Path, first: str) -> None:
    """A span id and its upper-case twin (a hostile or foreign writer's) in one file, the twin appended after
    a look: a cold read keeps both spans, and so does the look through the cache (the settled ids made a
    number of both, one span of the two)."""
    from tests.stores import twin_ids_store

    run = tmp_path / "r"
    append_twin = twin_ids_store(run, first)
    same_as_cold(run)
    append_twin()
    assert same_as_cold(run)["spans"] == 2
