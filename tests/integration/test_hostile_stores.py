"""Every reading command on stores nobody here wrote: it reads what can be read, never hangs, never crashes.

Each case runs the real ``lens-rl`` command in a child process on real files (a directory, a dangling link, a
link loop, a FIFO, a link to ``/dev/zero``, another user's file, a sparse file with no newline, planted cache
entries), under a timeout, and checks the exit status, that stderr names what was skipped in one line, and
that no traceback is printed.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import clean_env
from tests.stores import EPOCH_NS, span, write_process
from tests.stores import cache_record as record

ROOT = Path(__file__).resolve().parents[2]
_LIVE = {"v": 1, "format": "lens_rl.live/1", "kind": "live", "state": "running", "open": [], "phases": {}}


class Ran:
    """A finished command: its exit status, output and peak resident memory (bytes)."""

    def __init__(self, code: int, out: str, err: str, peak: int) -> None:
        self.returncode, self.stdout, self.stderr, self.peak = code, out, err, peak


#: Runs a command as root without the capabilities to read other users' files (root reads everything).
NO_DAC = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"]


def lens_child(
    *args: str,
    address_space: int | None = None,
    no_dac: bool = False,
    timeout: float = 240,
    env: dict[str, str] | None = None,
) -> Ran:
    """``lens-rl ARGS`` in a child process (with an address-space limit, or unable to read other users'
    files; ``env``: variables added), killed after ``timeout``; its peak RSS from the kernel's accounting of
    that child."""

    def limit() -> None:
        if address_space is not None:
            resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        child = subprocess.Popen(
            [*(NO_DAC if no_dac else []), sys.executable, "-m", "lens_rl", *args],
            stdout=out,
            stderr=err,
            env=clean_env(env),
            cwd=ROOT,
            preexec_fn=limit,
        )
        timer = threading.Timer(timeout, child.kill)
        timer.start()
        try:
            _, status, usage = os.wait4(child.pid, 0)
        finally:
            timer.cancel()
        child.returncode = code = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        ran = Ran(code, out.read().decode(), err.read().decode(), usage.ru_maxrss * 1024)
    assert code != -9, f"lens-rl {' '.join(args)} hung (killed after {timeout} s)"
    assert "Traceback" not in ran.stderr, ran.stderr
    return ran


def good_run(run: Path) -> Path:
    """A small readable run: a driver with two steps, a worker."""
    write_process(
        run,
        "driver",
        0,
        1,
        [
            span("step", 0, 10, "s1", step=1),
            span("generation", 1, 8, "g1", parent="s1", bucket="productive"),
            span("step", 10, 20, "s2", step=2),
            span("generation", 11, 18, "g2", parent="s2", bucket="productive"),
        ],
        role="driver",
    )
    write_process(run, "rollout", 0, 2, [span("generate", 2, 7, "w1", parent="g1", remote=True, bucket="productive")])
    return run


@pytest.fixture
def hostile(tmp_path: Path) -> Iterator[Path]:
    """A readable run with every kind of entry a reader cannot read, each named like a span or heartbeat file."""
    run = good_run(tmp_path / "run")
    (run / "spans-dir-0-3.jsonl").mkdir()
    (run / "spans-dangling-0-4.jsonl").symlink_to(run / "gone")
    (run / "spans-loop-0-5.jsonl").symlink_to(run / "spans-loop-0-5.jsonl")
    os.mkfifo(run / "spans-fifo-0-6.jsonl")
    (run / "spans-zero-0-7.jsonl").symlink_to("/dev/zero")
    os.mkfifo(run / "live-fifo-0-6.json")
    (run / "live-zero-0-7.json").symlink_to("/dev/zero")
    (run / "live-loop-0-5.json").symlink_to(run / "live-loop-0-5.json")
    beat = {**_LIVE, "role": "driver", "resource": {"rl.worker_group": "driver"}, "pid": 1}
    (run / "live-driver-0-1.json").write_text(json.dumps({**beat, "written_ns": time.time_ns(), "interval_ms": 10000}))
    yield run


_SPAN_ENTRIES = {
    "spans-dir-0-3.jsonl": "a directory",
    "spans-dangling-0-4.jsonl": "a dangling symbolic link",
    "spans-loop-0-5.jsonl": "a symbolic link loop",
    "spans-fifo-0-6.jsonl": "a FIFO",
    "spans-zero-0-7.jsonl": "a device",
}
_LIVE_ENTRIES = {"live-fifo-0-6.json": "a FIFO", "live-zero-0-7.json": "a device", "live-loop-0-5.json": "loop"}


def _named_once(stderr: str, entries: dict[str, str]) -> None:
    for name, why in entries.items():
        lines = [line for line in stderr.splitlines() if name in line]
        assert len(lines) == 1 and why in lines[0], (name, stderr)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_every_reading_command_skips_what_it_cannot_read_and_names_it(hostile: Path, receiver: Any) -> None:
    """goodput, perfetto, report, replay, status and watch read the good files beside a directory, a
    dangling link, a link loop, a FIFO and /dev/zero named like store files: each is named in one line on
    stderr, none blocks, and the command succeeds on the rest."""
    good = lens_child("goodput", str(hostile), "--json")
    assert good.returncode == 0 and json.loads(good.stdout)["spans"] == 5
    _named_once(good.stderr, _SPAN_ENTRIES)
    trace = lens_child("perfetto", str(hostile), "-o", str(hostile.parent / "t.json"))
    assert trace.returncode == 0 and "5 spans" in trace.stdout
    _named_once(trace.stderr, _SPAN_ENTRIES)
    page = lens_child("report", str(hostile), "-o", str(hostile.parent / "r.html"))
    assert page.returncode == 0 and (hostile.parent / "r.html").stat().st_size > 0
    _named_once(page.stderr, _SPAN_ENTRIES)
    sent = lens_child("replay", str(hostile), "--otlp", receiver.endpoint)
    assert sent.returncode == 0 and "replayed 5 spans" in sent.stdout
    _named_once(sent.stderr, _SPAN_ENTRIES)
    status = lens_child("status", str(hostile))
    assert status.returncode == 0 and "1 running" in status.stdout
    _named_once(status.stderr, _LIVE_ENTRIES)
    assert not any(name in status.stdout for name in _LIVE_ENTRIES)
    frame = lens_child("watch", str(hostile), "--once")
    assert frame.returncode == 0 and "goodput" in frame.stdout
    _named_once(frame.stderr, {**_SPAN_ENTRIES, **_LIVE_ENTRIES})
    assert not any(name in frame.stdout for name in (*_SPAN_ENTRIES, *_LIVE_ENTRIES))


@pytest.mark.timeout(120)
def test_another_users_unreadable_file_is_skipped_and_named(tmp_path: Path) -> None:
    """A span file the reader may not read (another user's, mode 600, on a shared filesystem) is named as not
    readable and skipped; the rest reads."""
    if shutil.which("setpriv") is None or os.geteuid() != 0:
        pytest.skip("needs root and setpriv to read as a reader without the right to read another's file")
    run = good_run(tmp_path / "run")
    secret = write_process(run, "private", 0, 9, [span("x", 0, 1, "x", bucket="idle")])
    os.chown(secret, 12345, 12345)
    secret.chmod(0o600)
    probe = subprocess.run([*NO_DAC, "cat", str(secret)], capture_output=True, timeout=60)
    if probe.returncode == 0:
        pytest.skip("dropping the capability did not stop root reading another user's file here")
    out = lens_child("goodput", str(run), "--json", no_dac=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["spans"] == 5
    _named_once(out.stderr, {secret.name: "not readable (permission denied)"})


@pytest.mark.timeout(300)
def test_a_run_folder_it_cannot_read_is_named_never_a_traceback(tmp_path: Path) -> None:
    """A run folder the reader may not list (mode 000, read without root's override): goodput, status and
    watch --run name it as not readable in one line and exit 2 (goodput crashed with exit 70, watch said
    "nothing recorded yet" and exited 0, status named nothing); without --run, where it is the run written
    last, the folder is named as skipped and the readable run is read."""
    as_root = os.geteuid() == 0
    if as_root and shutil.which("setpriv") is None:
        pytest.skip("needs setpriv to read as root without the right to read any folder")
    traces = tmp_path / "traces"
    good_run(traces / "older")
    locked = good_run(traces / "locked")
    beat = {**_LIVE, "role": "driver", "resource": {"rl.worker_group": "driver"}, "pid": 1}
    (locked / "live-driver-0-1.json").write_text(
        json.dumps({**beat, "written_ns": time.time_ns(), "interval_ms": 1000})
    )
    later = time.time() + 60
    for entry in locked.iterdir():
        os.utime(entry, (later, later))  # the run written last
    locked.chmod(0)
    try:
        if subprocess.run([*(NO_DAC if as_root else []), "ls", str(locked)], capture_output=True).returncode == 0:
            pytest.skip("dropping the capability did not stop root listing a folder of mode 000 here")
        for command in (["goodput"], ["status"], ["watch", "--once"]):
            out = lens_child(*command, str(traces), "--run", "locked", no_dac=as_root)
            assert out.returncode == 2 and "Traceback" not in out.stderr, (command, out.stderr)
            _named_once(out.stderr, {str(locked): "cannot be read (Permission denied)"})
            assert not out.stdout, (command, out.stdout)
        out = lens_child("goodput", str(traces), "--json", no_dac=as_root)
        assert out.returncode == 0 and json.loads(out.stdout)["spans"] == 5, out.stderr
        _named_once(out.stderr, {str(locked): "skipped"})
    finally:
        locked.chmod(0o755)


def _sparse(path: Path, size: int, prefix: bytes = b"") -> None:
    with open(path, "wb") as handle:
        handle.write(prefix)
        handle.truncate(size)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("cache", [True, False], ids=["cached", "cold"])
def test_a_line_with_no_end_costs_bounded_memory(tmp_path: Path, cache: bool) -> None:
    """A sparse 1 GiB file with no newline (as its first line, and after a header) is read in bounded memory:
    under a 768 MiB address-space limit goodput reads the rest and counts the overlong lines as skipped."""
    run = good_run(tmp_path / "run")
    header = (run / "spans-rollout-0-2.jsonl").read_bytes().split(b"\n")[0] + b"\n"
    _sparse(run / "spans-sparse-0-8.jsonl", 1 << 30)
    _sparse(run / "spans-sparse-0-9.jsonl", 1 << 30, header.replace(b'"pid": 2', b'"pid": 9'))
    out = lens_child("goodput", str(run), "--json", "--jobs", "1", *([] if cache else ["--no-cache"]),
                     address_space=768 << 20)  # fmt: skip
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["spans"] == 5 and report["skipped_lines"] == 2
    assert out.peak < 400 << 20


@pytest.mark.timeout(300)
def test_a_huge_heartbeat_costs_bounded_memory(tmp_path: Path) -> None:
    """A sparse 1 GiB heartbeat file is named as too large (read up to 16 MiB), under a 768 MiB address-space
    limit; status reads the others and says so."""
    run = tmp_path / "run"
    run.mkdir()
    beat = {**_LIVE, "role": "driver", "resource": {"rl.worker_group": "driver"}, "pid": 1}
    (run / "live-driver-0-1.json").write_text(json.dumps({**beat, "written_ns": time.time_ns(), "interval_ms": 10000}))
    _sparse(run / "live-huge-0-2.json", 1 << 30, b'{"format": "lens_rl.live/1", "pad": "')
    for command in (["status"], ["watch", "--once"]):
        out = lens_child(*command, str(run), address_space=768 << 20)
        assert out.returncode == 0, out.stderr
        assert "live-huge-0-2.json: larger than 16777216 bytes" in out.stderr, (out.stdout, out.stderr)
        assert out.peak < 300 << 20


@pytest.mark.timeout(120)
def test_a_run_folder_that_is_a_link_loop_is_said_to_be_one(tmp_path: Path) -> None:
    """A folder given on the command line that is a symbolic link loop is reported as such (not as missing)."""
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    out = lens_child("goodput", str(loop))
    assert out.returncode == 2 and "is a symbolic link loop" in out.stderr


# ------------------------------------------------------------------------------------------ values in lines


def _line(**fields: Any) -> str:
    row = {"n": "x", "t": "a" * 32, "s": os.urandom(8).hex(), "b": EPOCH_NS + 1, "e": EPOCH_NS + 2}
    row.update(fields)
    return json.dumps(row)


_BAD_LINES = [
    _line(a={"x": 0})[:-1].replace('{"x": 0}', '{"x": ' + "[" * 100_000 + "]" * 100_000 + "}") + "}",
    _line(b=-(2**63), e=2**63 - 1),
    _line(b=2**70, e=2**71),
    _line(b=1_000_000_000, e=2_000_000_000),  # 1970
    _line(b=8_000_000_000 * 10**9, e=8_000_000_001 * 10**9),  # after 2200
    _line(b=EPOCH_NS + 5, e=EPOCH_NS + 4),  # ends before it starts
    _line(b=float(EPOCH_NS), e=float(EPOCH_NS + 1)),
    _line(b="soon", e="later"),
    _line(n=7),
    _line(s=[1]),
    _line(a=[1]),
    _line(ev={"n": 1}),
    _line(p={"x": 1}),
    _line(pr="yes"),
    _line(k=5),
]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_no_value_in_a_line_crashes_a_reader(tmp_path: Path, receiver: Any) -> None:
    """Nesting 100,000 deep, times from -2^63 to 2^63-1, integers past 64 bits (in a line and in a header),
    times before 2000 or after 2200, an end before the start, fields of the wrong JSON type: each such line
    is skipped and counted, the header's bad fields left out; every command reads the rest, no traceback."""
    run = good_run(tmp_path / "run")
    header = json.loads((run / "spans-rollout-0-2.jsonl").read_text().splitlines()[0])
    header.update(pid=2**70, since=2**80)
    header["resource"].update({"rl.attempt": 2**65, "nv.dl.rank": 2**64, "rl.gpu_ids": [2**63 + 1]})
    good = _line(n="ok", a={"rl.bucket": "idle", "rl.step": 2**70, "rl.num_tokens": 2**90})
    (run / "spans-odd-0-3.jsonl").write_text("\n".join([json.dumps(header), *_BAD_LINES, good]) + "\n")
    out = lens_child("goodput", str(run), "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["spans"] == 6 and report["skipped_lines"] == len(_BAD_LINES) + 5  # (5 header fields)
    again = lens_child("goodput", str(run), "--json")  # (through the cache it wrote)
    assert json.loads(again.stdout) == report
    assert lens_child("perfetto", str(run), "-o", str(tmp_path / "t.pftrace")).returncode == 0
    assert lens_child("perfetto", str(run), "-o", str(tmp_path / "t.json"), "--steps", "1-2").returncode == 0
    assert lens_child("report", str(run), "-o", str(tmp_path / "r.html")).returncode == 0
    sent = lens_child("replay", str(run), "--otlp", receiver.endpoint)
    assert sent.returncode == 0 and "replayed 6 spans" in sent.stdout


# ------------------------------------------------------------------------------------------- exit statuses


def _refused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_folder_with_no_readable_span_is_bad_input_for_every_command(tmp_path: Path) -> None:
    """goodput, report and replay on a folder whose only span file holds no readable span exit 2 with one
    line; report writes no page."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "spans-x-0-1.jsonl").write_text("not a store file\n")
    page = tmp_path / "r.html"
    for args in (
        ["goodput", str(run)],
        ["report", str(run), "-o", str(page)],
        ["replay", str(run), "--otlp", "http://127.0.0.1:9"],
    ):
        out = lens_child(*args)
        assert out.returncode == 2, (args, out.stderr)
        assert "no readable lens_rl spans" in out.stderr, out.stderr
    assert not page.exists()
    assert not (run / ".lens_rl-cache").exists()


@pytest.mark.timeout(300)
def test_a_rejected_input_writes_no_key_in_the_users_cache(tmp_path: Path) -> None:
    """goodput and report on a folder with no readable span, perfetto asked for steps a run does not have, exit
    2 and write nothing anywhere: no cache in the run folder, no ``answers.key`` (nor its folder) in the user's cache directory; a good run then makes it."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "spans-x-0-1.jsonl").write_text("not a store file\n")
    home = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    good = good_run(tmp_path / "good")
    for args in (
        ["goodput", str(run)],
        ["report", str(run), "-o", str(tmp_path / "r.html")],
        # (steps the run does not have, found by its parallel readers: they had made the key)
        ["perfetto", str(good), "-o", str(tmp_path / "t.json"), "--steps", "100-200", "--jobs", "2"],
    ):
        out = lens_child(*args, env=home)
        assert out.returncode == 2, (args, out.stderr)
        assert not (tmp_path / "xdg").exists() and not (run / ".lens_rl-cache").exists(), args
    assert lens_child("goodput", str(good), env=home).returncode == 0
    assert (tmp_path / "xdg" / "lens_rl" / "answers.key").stat().st_mode & 0o777 == 0o600


@pytest.mark.timeout(300)
def test_watch_once_names_what_it_skipped_on_stderr(tmp_path: Path) -> None:
    """watch --once beside a FIFO, a dangling link and a malformed heartbeat: each named in one line on stderr
    (as every reading command does), none in the frame on stdout."""
    run = good_run(tmp_path / "run")
    os.mkfifo(run / "spans-fifo-0-6.jsonl")
    (run / "spans-dangling-0-4.jsonl").symlink_to(run / "gone")
    (run / "live-x-0-9.json").write_text("{}")
    frame = lens_child("watch", str(run), "--once")
    assert frame.returncode == 0 and "goodput" in frame.stdout
    names = {
        "spans-fifo-0-6.jsonl": "a FIFO",
        "spans-dangling-0-4.jsonl": "a dangling symbolic link",
        "live-x-0-9.json": "not a lens_rl heartbeat",
    }
    _named_once(frame.stderr, names)
    assert all(line.startswith("lens-rl: ") for line in frame.stderr.splitlines())
    assert not any(name in frame.stdout for name in names)


@pytest.mark.timeout(300)
def test_replay_to_a_refused_collector_says_one_line_of_its_own(tmp_path: Path) -> None:
    """replay to a collector that refuses the connection exits 2 with one line of its own (the exporter's
    log lines muted, its outcome in that line), the endpoint's password masked."""
    run = good_run(tmp_path / "run")
    url = f"http://alice:hunter2@127.0.0.1:{_refused_port()}"
    out = lens_child("replay", str(run), "--otlp", url, "--timeout-ms", "3000")
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lens-rl: error: the collector at"), out.stderr
    assert "Connection refused" in lines[0]
    assert "hunter2" not in out.stderr and "[REDACTED]@127.0.0.1" in lines[0]  # (SPEC "Secrets")
    assert out.stdout == ""


@pytest.mark.timeout(300)
def test_a_command_that_rejects_its_input_leaves_no_cache(tmp_path: Path) -> None:
    """--run naming a folder with no span files, and --steps selecting no step, exit 2 and leave no cache
    folder behind."""
    good_run(tmp_path / "run")
    (tmp_path / "empty").mkdir()
    out = lens_child("goodput", str(tmp_path), "--run", "empty")
    assert out.returncode == 2 and not (tmp_path / "empty" / ".lens_rl-cache").exists()
    out = lens_child("goodput", str(tmp_path / "run"), "--steps", "90-99")
    assert out.returncode == 2 and "selects no step" in out.stderr
    assert not (tmp_path / "run" / ".lens_rl-cache").exists()


# ------------------------------------------------------------------------------------------------ the cache


def _planted_memo(body: bytes) -> bytes:
    import hashlib

    return hashlib.sha1(body).hexdigest().encode() + b"\n" + body


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_planted_cache_can_neither_run_code_nor_allocate(tmp_path: Path) -> None:
    """Cache entries replaced by a small pickle that would build a 1.5 GB bytearray and one that would run a
    command (a cache record is MessagePack: a pickle is never loaded), a critical-path memo not under the
    user's seal, and a MessagePack record announcing a 4 GiB array: the answer is a cold read's, the child's
    peak memory stays small, nothing runs, and stderr says so in one line (the entries'; a memo under
    another's seal is not read at all)."""
    import pickle

    from lens_rl.offline.run.cache_files import FORMAT

    run = good_run(tmp_path / "run")
    first = lens_child("goodput", str(run), "--json")
    assert first.returncode == 0
    cache = run / ".lens_rl-cache"
    entries = sorted(cache.glob("*.cache"))
    assert len(entries) == 2 and (cache / "critical-memo.msgpack").exists()
    magic = FORMAT.encode() + b"\n"
    marker = tmp_path / "ran"
    allocate = b"cbuiltins\nbytearray\n(J\x00\x2f\x68\x59tR."  # bytearray(1_500_000_000)
    assert len(magic + allocate) < 51
    entries[0].write_bytes(magic + record(allocate))
    entries[1].write_bytes(magic + record(pickle.dumps(_Runs(f"touch {marker}"))))
    (cache / "critical-memo.msgpack").write_bytes(_planted_memo(b"\x80\x04]r\xff\xff\xff\x7f."))
    for report in cache.glob("report-*.json"):
        report.unlink()
    again = lens_child("goodput", str(run), "--json")
    assert again.returncode == 0 and json.loads(again.stdout) == json.loads(first.stdout)
    assert again.peak < 300 << 20, again.peak
    assert not marker.exists()
    said = [line for line in again.stderr.splitlines() if "cache" in line]
    assert len(said) == 1 and "2 cache file(s) not used" in said[0], again.stderr
    entries[0].write_bytes(magic + record(b"\x9f\xa7entry/1\xc6\xff\xff\xff\xff" + b"x" * 64))  # bin 32: 4 GiB
    for report in cache.glob("report-*.json"):
        report.unlink()
    third = lens_child("goodput", str(run), "--json", address_space=1 << 30)
    assert third.returncode == 0 and json.loads(third.stdout) == json.loads(first.stdout)
    assert "corrupt (" in third.stderr


class _Runs:
    """What a planted pickle would run when loaded: a shell command."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (self.command,))


@pytest.mark.timeout(300)
def test_a_fifo_or_device_planted_in_the_cache_blocks_nothing(tmp_path: Path) -> None:
    """FIFOs and a link to /dev/zero in place of the cache's entries, its memo, its sizes and its report are
    never opened: goodput answers as a cold read does, with one line about the cache."""
    run = good_run(tmp_path / "run")
    first = lens_child("goodput", str(run), "--json")
    cache = run / ".lens_rl-cache"
    entries = sorted(cache.glob("*.cache"))
    planted = [*entries, cache / "critical-memo.msgpack", cache / "sizes.json", *cache.glob("report-*.json")]
    for n, path in enumerate(planted):
        path.unlink()
        if n % 2:
            os.mkfifo(path)
        else:
            path.symlink_to("/dev/zero")
    again = lens_child("goodput", str(run), "--json", timeout=120)
    assert again.returncode == 0 and json.loads(again.stdout) == json.loads(first.stdout)
    said = [line for line in again.stderr.splitlines() if "cache" in line]
    assert len(said) == 1, again.stderr
