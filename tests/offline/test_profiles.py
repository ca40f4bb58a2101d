"""Profiler captures on the reading side: ``lens-rl goodput`` lists them (``--json`` ``profiles``, typed), the report
links each profiled step to its file, ``perfetto`` puts the window on its step's track, and a torch capture's
per-phase summary (CPU op time, kernel time, the share with no kernel running)."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lens_rl.offline.rollup.schema import GoodputWithProfiles, mismatches
from lens_rl.offline.run.profiles import torch_summary
from tests.devices.profile_helpers import ROOT, STANDINS, finish, loop_env, start_loop


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lens_rl", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def profiled_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run of the loop with steps 2-3 captured by the cuda backend (its API a stand-in)."""
    tmp = tmp_path_factory.mktemp("profiled")
    env = loop_env(tmp / "t", {"LENS_RL_OTEL_PROFILE": "steps=2-3,backend=cuda", "CUDA_STANDIN_LOG": str(tmp / "log")})
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{STANDINS}"
    finish(start_loop(1, 5, env))
    return tmp / "t"


@pytest.mark.slow
def test_goodput_lists_the_captures_typed(profiled_run: Path) -> None:
    """``goodput --json`` has ``profiles``: one row per capture with its step, rank, backend, reason and path,
    matching the schema's types; the table prints them too."""
    done = _cli("goodput", str(profiled_run), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert mismatches(report, GoodputWithProfiles) == []
    rows = [(p["step"], p["rank"], p["backend"], p["reason"], p["path"], p["exists"]) for p in report["profiles"]]
    assert rows == [
        (2, 1, "cuda", "config", "profiles/trainer-1-step2.cuda.json", True),
        (3, 1, "cuda", "config", "profiles/trainer-1-step3.cuda.json", True),
    ]
    table = _cli("goodput", str(profiled_run))
    assert "step 2  trainer rank 1  cuda  config: profiles/trainer-1-step2.cuda.json" in table.stdout


@pytest.mark.slow
def test_the_report_links_each_profiled_step_to_its_file(profiled_run: Path, tmp_path: Path) -> None:
    """The report's "Profiled steps" section links step 2 and step 3 to files that exist, relative to the page."""
    pytest.importorskip("plotly")
    out = tmp_path / "page" / "report.html"
    out.parent.mkdir()
    done = _cli("report", str(profiled_run), "-o", str(out))
    assert done.returncode == 0, done.stderr
    section = out.read_text().split('<section id="profiles">', 1)[1]
    links = re.findall(r'<td>step (\d+)</td>.*?<a href="([^"]+)">', section)
    assert [step for step, _ in links] == ["2", "3"]
    for _, href in links:
        assert (out.parent / href).resolve().is_file()


@pytest.mark.slow
def test_perfetto_places_the_window_on_its_steps_track(profiled_run: Path, tmp_path: Path) -> None:
    """In ``perfetto``'s output each rl.profile window is an X event on the same track as its step, inside it."""
    out = tmp_path / "trace.json"
    assert _cli("perfetto", str(profiled_run), "-o", str(out)).returncode == 0
    body = json.loads(out.read_text())
    events = body["traceEvents"] if isinstance(body, dict) else body
    steps = {e["args"].get("rl.step"): e for e in events if e.get("ph") == "X" and e["name"] == "step"}
    windows = [e for e in events if e.get("ph") == "X" and e["name"] == "rl.profile"]
    assert len(windows) == 2
    for window in windows:
        step = steps[window["args"]["rl.profile.step"]]
        assert (window["pid"], window["tid"]) == (step["pid"], step["tid"])
        assert step["ts"] <= window["ts"] <= step["ts"] + step["dur"]


def _trace(path: Path, events: list[dict[str, Any]], base_ns: int) -> Path:
    path.write_bytes(gzip.compress(json.dumps({"baseTimeNanoseconds": base_ns, "traceEvents": events}).encode()))
    return path


def test_the_torch_summary_measures_cpu_ops_kernels_and_time_with_no_kernel(tmp_path: Path) -> None:
    """Per phase: the union of CPU ops inside it, of kernels inside it, and the share with no kernel running."""
    base = 1_000_000_000_000
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 400},  # µs after base
        {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "ts": 100, "dur": 100},  # nested: counted once
        {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 300, "dur": 200},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 1200, "dur": 100},
        {"ph": "i", "cat": "cpu_op", "name": "marker", "ts": 0},
    ]
    trace = _trace(tmp_path / "t.pt.trace.json.gz", events, base)
    summary = torch_summary(
        trace, [("forward", base, base + 1_000_000), ("backward", base + 1_000_000, base + 2_000_000)]
    )
    assert summary == [
        {"phase": "forward", "wall_s": 0.001, "cpu_op_s": 0.0004, "kernel_s": 0.0002, "no_kernel_share": 0.8},
        {"phase": "backward", "wall_s": 0.001, "cpu_op_s": 0.0001, "kernel_s": 0.0, "no_kernel_share": 1.0},
    ]
    cpu_only = _trace(tmp_path / "c.pt.trace.json.gz", events[:2], base)
    (row,) = torch_summary(cpu_only, [("forward", base, base + 1_000_000)]) or []
    assert row["kernel_s"] is None and row["no_kernel_share"] is None
    (tmp_path / "bad.gz").write_bytes(b"not gzip")
    assert torch_summary(tmp_path / "bad.gz", [("forward", 0, 1)]) is None


def _captured_store(run: Path, path: str) -> None:
    """A run folder with one torch capture of step 1 on trainer rank 0 (an ``rl.profile`` span naming ``path``)
    over a ``forward`` phase."""
    from tests.stores import span, write_process

    (run / "profiles").mkdir(parents=True)
    window = {"rl.profile.path": path, "rl.profile.backend": "torch", "rl.profile.reason": "config"}
    rows = [
        span("step", 0, 2, "s1", step=1),
        span("rl.profile", 0.1, 1.9, "w", parent="s1", bucket="overhead", step=1, **window, **{"rl.profile.step": 1}),
        span("forward", 0.2, 1.8, "f", parent="w", bucket="productive", step=1),
    ]
    write_process(run, "trainer", 0, 7, rows)


@pytest.mark.parametrize(
    "body",
    [
        b'[{"ph": "X", "cat": "cpu_op", "ts": 0, "dur": 1}]',  # (the trace-event format's bare array)
        b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "ts": 1e400, "dur": 1}]}',  # (an infinite time)
        b'{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": 1, "dur": 1e400}]}',
        b'{"baseTimeNanoseconds": 1e400, "traceEvents": []}',
        b"[" * 100_000 + b"]" * 100_000,  # (nested past the parser's depth)
    ],
)
def test_a_capture_file_of_any_content_never_crashes_goodput_or_the_report(tmp_path: Path, body: bytes) -> None:
    """Any store: a capture file that is no readable torch trace (its times infinite, nested too deep, the
    bare-array form) is listed with no summary or what can be read, never a traceback."""
    run = tmp_path / "t" / "r1"
    _captured_store(run, "profiles/trainer-0-step1.pt.trace.json.gz")
    (run / "profiles" / "trainer-0-step1.pt.trace.json.gz").write_bytes(gzip.compress(body))
    done = _cli("goodput", str(run), "--json", "--no-cache")
    assert done.returncode == 0, done.stderr[-2000:]
    (row,) = json.loads(done.stdout)["profiles"]
    assert row["exists"] and row["path"] == "profiles/trainer-0-step1.pt.trace.json.gz"
    for phase in row["summary"] or []:
        assert phase["kernel_s"] is None and phase["cpu_op_s"] == 0.0
    page = _cli("report", str(run), "-o", str(tmp_path / "r.html"))
    assert page.returncode == 0, page.stderr[-2000:]


def test_a_capture_whose_compressed_data_is_corrupt_is_listed_without_summary(tmp_path: Path) -> None:
    """A capture cut or damaged inside its compressed data (its gzip header whole: a disk or a copy gone wrong)
    is listed with no summary; zlib's error is no OSError, so it once escaped as a traceback (exit 70)."""
    run = tmp_path / "t" / "r1"
    _captured_store(run, "profiles/trainer-0-step1.pt.trace.json.gz")
    good = gzip.compress(b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "ts": 0, "dur": 1}]}' * 50)
    damaged = good[:10] + bytes(b ^ 0xFF for b in good[10:-8]) + good[-8:]
    (run / "profiles" / "trainer-0-step1.pt.trace.json.gz").write_bytes(damaged)
    done = _cli("goodput", str(run), "--json", "--no-cache")
    assert done.returncode == 0, done.stderr[-2000:]
    (row,) = json.loads(done.stdout)["profiles"]
    assert row["exists"] and row["summary"] is None


def test_a_capture_path_outside_the_run_folder_is_not_said_to_exist(tmp_path: Path) -> None:
    """``rl.profile.path`` is relative to the run folder: an absolute path (a hand-edited or foreign store)
    names no capture of this run, so it is listed as missing and not read, nor linked from the report."""
    outside = tmp_path / "elsewhere.pt.trace.json.gz"
    outside.write_bytes(gzip.compress(b'{"traceEvents": []}'))
    run = tmp_path / "t" / "r1"
    _captured_store(run, str(outside))
    done = _cli("goodput", str(run), "--json", "--no-cache")
    assert done.returncode == 0, done.stderr[-2000:]
    (row,) = json.loads(done.stdout)["profiles"]
    assert row["exists"] is False and row["summary"] is None
    assert _cli("report", str(run), "-o", str(tmp_path / "r.html")).returncode == 0
    assert "elsewhere.pt.trace.json.gz</a>" not in (tmp_path / "r.html").read_text(encoding="utf-8")
