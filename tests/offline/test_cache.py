"""The refresh cache gives a cold read's answer, always: a 50 k-span store read cold, grown by whole lines and
by a line still being written, a parent written after its children across two reads, a child written after
its settled parent, a file replaced by another of the same size, a re-init's header, a cache of another
version, a corrupt or planted one, a read-only run folder, --jobs. ``watch --once`` on a real pty."""

from __future__ import annotations

import json
import os
import pickle
import pty
import select
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from lens_rl.offline.cache import CACHE_DIR, cache_folder
from lens_rl.offline.goodput import analyze, analyze_parts
from lens_rl.store import span_files
from tests.conftest import lens
from tests.stores import header, span

WORKERS = 9


def _step_lines(step: int) -> dict[str, list[dict[str, Any]]]:
    """One step's spans per file, in the order processes write them (children first)."""
    t = step * 10.0
    out: dict[str, list[dict[str, Any]]] = {"driver": [], **{f"w{w}": [] for w in range(WORKERS)}}
    for k, (name, bucket) in enumerate(
        (("generation", "productive"), ("policy_training", "productive"), ("weight_sync", "overhead"))
    ):
        out["driver"].append(span(name, t + 3 * k, t + 3 * k + 2.5, f"d{step}-{k}", parent=f"s{step}", bucket=bucket))
    out["driver"].append(span("step", t, t + 9.5, f"s{step}", parent="job", step=step))
    for w in range(WORKERS):
        k = w % 3
        start = t + 3 * k + 0.1 + 0.01 * w
        out[f"w{w}"].append(
            span("barrier", start + 1.5, start + 2.0, f"b{w}-{step}", parent=f"p{w}-{step}", bucket="idle")
        )
        out[f"w{w}"].append(
            span(
                "train",
                start,
                start + 2.0,
                f"p{w}-{step}",
                parent=f"d{step}-{k}",
                remote=True,
                bucket="productive",
                step=step,
                **{"rl.num_tokens": 100},
            )
        )
    return out


def _write(run: Path, first: int, last: int) -> None:
    """Steps first..last-1 appended to every file (the headers written with the first)."""
    run.mkdir(parents=True, exist_ok=True)
    for step in range(first, last):
        for name, rows in _step_lines(step).items():
            path = run / (
                "spans-driver-0-1.jsonl"
                if name == "driver"
                else f"spans-lm_policy-{name[1:]}-{100 + int(name[1:])}.jsonl"
            )
            if not path.exists():
                group, rank, pid = (
                    ("driver", 0, 1) if name == "driver" else ("lm_policy", int(name[1:]), 100 + int(name[1:]))
                )
                extra = {"root": "job", "role": "driver"} if name == "driver" else {}
                path.write_text(json.dumps(header(group, rank, pid, **extra)) + "\n")
            with path.open("a") as handle:
                for row in rows:
                    handle.write(json.dumps(row) + "\n")


def _same(run: Path, **options: Any) -> dict[str, Any]:
    """The warm (cached) report, asserted equal to a cold read's."""
    paths = span_files(run)
    warm = analyze(paths, jobs=1, cache=cache_folder(run), **options)
    cold = json.loads(json.dumps(analyze(paths, jobs=1, **options), default=str))
    assert json.dumps(warm, sort_keys=True) == json.dumps(cold, sort_keys=True)
    return warm


def test_a_grown_store_reads_as_a_cold_read_does(tmp_path: Path) -> None:
    """About 50 k spans read cold, then grown by whole steps, by a line still being written, and the line
    finished: every warm read equals a cold one (spans, skipped lines, every figure)."""
    run = tmp_path / "r"
    _write(run, 0, 2300)
    first = _same(run)
    assert first["spans"] > 50_000 and (run / CACHE_DIR).is_dir()
    _write(run, 2300, 2330)
    assert _same(run)["spans"] > first["spans"]
    _write(run, 2330, 2340)
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
    _write(run, 0, 3)
    _same(run)
    rows = _step_lines(3)
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
    _write(run, 0, 40)
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
    one line, the answer a cold read's, the planted code never run."""
    run = tmp_path / "r"
    _write(run, 0, 20)
    _same(run)
    folder = Path(cache_folder(run))
    for report in folder.glob("report-*.json"):
        report.unlink()
    victim = folder / "spans-lm_policy-1-101.jsonl.cache"
    data = victim.read_bytes().replace(b"lens_rl.cache/1", b"lens_rl.cache/1", 1)
    entry = pickle.loads(data[len(b"lens_rl.cache/1\n") :])
    entry.options = entry.options.replace("(", "('0.0.0-other', ", 1)
    victim.write_bytes(b"lens_rl.cache/1\n" + pickle.dumps(entry))
    (folder / "spans-lm_policy-2-102.jsonl.cache").write_bytes(b"lens_rl.cache/1\n\x80\x05garbage")
    marker = tmp_path / "planted"

    class Planted:
        def __reduce__(self) -> Any:
            return (os.system, (f"touch {marker}",))

    (folder / "spans-lm_policy-3-103.jsonl.cache").write_bytes(b"lens_rl.cache/1\n" + pickle.dumps(Planted()))
    caplog.set_level("WARNING", "lens_rl")
    _same(run)
    assert not marker.exists()
    (line,) = [r.getMessage() for r in caplog.records if "cache file(s) not used" in r.getMessage()]
    assert "3 cache file(s) not used" in line


def test_a_read_only_run_folder_caches_in_the_users_cache_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the run folder cannot be written, the cache goes to $XDG_CACHE_HOME/lens_rl/<run>; the answer is the same."""
    if os.geteuid() == 0:
        pytest.skip("root writes a read-only folder anyway")
    run = tmp_path / "r"
    _write(run, 0, 10)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home-cache"))
    run.chmod(0o555)
    try:
        folder = cache_folder(run)
        assert folder.startswith(str(tmp_path / "home-cache" / "lens_rl"))
        _same(run)
    finally:
        run.chmod(0o755)


def test_a_read_only_run_folder_as_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same where the folder is on a read-only mount (as root: a bind mount; skipped where none can be made)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount")
    run = tmp_path / "r"
    _write(run, 0, 10)
    view = tmp_path / "view"
    view.mkdir()
    if os.system(f"mount --bind {run} {view} 2>/dev/null && mount -o remount,bind,ro {view} 2>/dev/null") != 0:
        os.system(f"umount {view} 2>/dev/null")
        pytest.skip("no bind mount here")
    try:
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home-cache"))
        assert cache_folder(view).startswith(str(tmp_path / "home-cache" / "lens_rl"))
        _same(view)
    finally:
        os.system(f"umount {view}")


def test_the_cli_reads_through_the_cache_and_no_cache_reads_cold(tmp_path: Path) -> None:
    """lens-rl goodput --json with and without the cache print the same bytes; the cache is in the run folder."""
    run = tmp_path / "traces" / "r"
    _write(run, 0, 30)

    def goodput(*extra: str) -> str:
        out = lens("goodput", str(tmp_path / "traces"), "--json", *extra)
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout

    cold = goodput("--no-cache")
    assert not (run / CACHE_DIR).exists()
    assert goodput() == cold and goodput() == cold and (run / CACHE_DIR).is_dir()


def _pty_run(args: list[str], *, interrupt_after: float | None = None, timeout: float = 60) -> tuple[int, str]:
    """Run the CLI on a real pty (as a terminal user would), optionally sending Ctrl-C; its status and output."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: the CLI on the pty
        os.execv(sys.executable, [sys.executable, "-m", "lens_rl", *args])
    output = b""
    deadline = time.monotonic() + timeout
    interrupted = False
    while time.monotonic() < deadline:
        if interrupt_after is not None and not interrupted and time.monotonic() > deadline - timeout + interrupt_after:
            os.kill(pid, signal.SIGINT)
            interrupted = True
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            try:
                output += os.read(fd, 65536)
            except OSError:
                pass
            return os.waitstatus_to_exitcode(status), output.decode(errors="replace")
    os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), output.decode(errors="replace")


def test_watch_draws_a_frame_on_a_terminal_and_quits_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    """--once on a pty prints the headline, the processes and the last steps; the live view quits on Ctrl-C
    with status 0 and no traceback."""
    pytest.importorskip("rich")
    run = tmp_path / "traces" / "r"
    _write(run, 0, 12)
    code, frame = _pty_run(["watch", str(tmp_path / "traces"), "--once"])
    assert code == 0, frame
    assert "goodput" in frame and "the last 8 steps" in frame and "nothing recorded" not in frame
    code, live = _pty_run(["watch", str(tmp_path / "traces"), "--interval", "0.3"], interrupt_after=4.0)
    assert code == 0, live
    assert "goodput" in live and "Traceback" not in live


@pytest.mark.slow
def test_ray_reads_through_the_cache_with_the_same_answer(tmp_path: Path) -> None:
    """--ray: the files read as Ray tasks through the cache (cold, then grown) print what a cold local read
    prints."""
    pytest.importorskip("ray")
    run = tmp_path / "traces" / "r"
    _write(run, 0, 30)

    def goodput(*extra: str) -> str:
        out = lens("goodput", str(tmp_path / "traces"), "--json", *extra)
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout

    assert goodput("--ray") == goodput("--no-cache", "--jobs", "1")
    _write(run, 30, 40)
    assert goodput("--ray") == goodput("--no-cache", "--jobs", "1")
