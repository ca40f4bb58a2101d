"""The lens-rl command, run as a user runs it: exit codes, JSON schema, errors without tracebacks."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lens_rl.testing import OTLPReceiver, refused_endpoint
from tests.conftest import clean_env, lens, run_python
from tests.stores import EPOCH_NS

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def traced_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real traced run in the file store, with a truncated last line appended."""
    trace_dir = tmp_path_factory.mktemp("store")
    out = run_python(
        f"""
        import time, lens_rl
        from lens_rl import traced_phase
        lens_rl.init_telemetry_driver({{"telemetry": {{"enabled": True, "trace_dir": {str(trace_dir)!r},
                                       "run_id": "run1"}}}}, "grpo")
        for step in (1, 2):
            with traced_phase("step", step=step):
                with traced_phase("generation"):
                    time.sleep(0.03)
                with traced_phase("weight_sync"):
                    time.sleep(0.01)
        lens_rl.shutdown_telemetry(3000)
        """
    )
    assert out.returncode == 0, out.stderr
    spans = next((trace_dir / "run1").glob("spans-*.jsonl"))
    with open(spans, "a") as handle:
        handle.write('{"v": 1, "name": "cut-off by SIG')
    return trace_dir


def test_goodput_table(traced_run: Path) -> None:
    """The table names the goodput, the steps and the driver."""
    out = lens("goodput", str(traced_run))
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("goodput ") and "step 2" in out.stdout and "group driver" in out.stdout
    assert "skipped 1 unreadable line" in out.stderr


def test_goodput_json_schema(traced_run: Path) -> None:
    """--json gives the documented schema with the job ratio under 'goodput'."""
    out = lens("goodput", str(traced_run), "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    job = report["job"]
    assert report["schema"] == "lens_rl.goodput/1" and 0.0 < report["goodput"] < 1.0
    assert report["goodput"] == pytest.approx(job["seconds"]["productive"] / job["wall_s"], rel=1e-4)  # over the wall
    assert set(report) >= {"job", "steps", "worker_groups", "ranks", "runs", "spans", "files", "skipped_lines"}
    assert [s["step"] for s in report["steps"]] == [1, 2] and report["skipped_lines"] == 1
    assert set(report["job"]["seconds"]) == {"productive", "overhead", "idle", "wasted"}


@pytest.mark.parametrize("case", ["missing", "empty", "garbage", "file"])
def test_bad_trace_dir_is_one_line_and_exit_2(case: str, tmp_path: Path) -> None:
    """A missing, empty or garbage directory is one error line naming the path, status 2."""
    path = tmp_path / "nope"
    if case == "empty":
        path.mkdir()
    elif case == "garbage":
        (path / "run").mkdir(parents=True)
        (path / "run" / "spans-x-0-1.jsonl").write_bytes(b"\x00\xffnot json\n[1,2]\n")
    elif case == "file":
        path.write_text("x")
    for command in (["goodput", str(path)], ["perfetto", str(path), "-o", str(tmp_path / "t.json")]):
        out = lens(*command)
        assert out.returncode == 2
        assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
        assert str(path) in out.stderr


def test_perfetto_is_valid_chrome_trace(traced_run: Path, tmp_path: Path) -> None:
    """One process per group and rank, threads named, spans as X events coloured by bucket."""
    target = tmp_path / "trace.json"
    out = lens("perfetto", str(traced_run), "-o", str(target))
    assert out.returncode == 0, out.stderr
    doc = json.loads(target.read_text())
    events = doc["traceEvents"]
    names = [e for e in events if e["ph"] == "M" and e["name"] == "process_name"]
    assert len(names) == 1 and names[0]["args"]["name"].startswith("driver rank 0")
    assert any(e["ph"] == "M" and e["name"] == "thread_name" for e in events)
    spans = [e for e in events if e["ph"] == "X"]
    assert {"pid", "tid", "ts", "dur", "name", "args", "cname", "cat"} <= set(spans[0])
    gen = next(e for e in spans if e["name"] == "generation")
    assert gen["cname"] == "good" and gen["cat"] == "productive" and gen["dur"] >= 25_000
    assert next(e for e in spans if e["name"] == "weight_sync")["cname"] == "yellow"
    assert all(e["ts"] >= 0 for e in spans)


def test_every_command_that_reads_a_run_takes_no_cache(traced_run: Path, tmp_path: Path) -> None:
    """``--no-cache`` is accepted by goodput, report, perfetto and status alike (a script passes it to any of
    them), each answering as it does without it."""
    runs = {
        "goodput": ["--json"],
        "report": ["-o", str(tmp_path / "r.html")],
        "perfetto": ["-o", str(tmp_path / "t.json")],
    }
    for command, extra in runs.items():
        out = lens(command, str(traced_run), *extra, "--no-cache")
        assert out.returncode == 0, (command, out.stderr)
    beat = tmp_path / "live-driver-0-1.json"
    beat.write_text("{}")
    plain, cold = lens("status", str(tmp_path)), lens("status", str(tmp_path), "--no-cache")
    assert "unrecognized" not in cold.stderr and (cold.returncode, cold.stdout) == (plain.returncode, plain.stdout)


def test_times_out_of_range_are_skipped_in_every_tool(tmp_path: Path) -> None:
    """A line whose times are valid JSON but no plausible time (negative, before 2000, from 2200 on, past
    64 bits, text, missing, an end before the start) is a bad line: goodput, both Perfetto formats and the
    report skip and count it and read the rest."""
    run = tmp_path / "store" / "run"
    run.mkdir(parents=True)
    header = {"v": 2, "header": True, "resource": {"rl.worker_group": "driver", "nv.dl.rank": 0, "process.pid": 1}}
    t0 = EPOCH_NS
    good = {"n": "generation", "t": "a" * 32, "s": "1" * 16, "b": t0 + 2_000, "e": t0 + 5_000}
    good["a"] = {"rl.bucket": "productive"}
    odd = [
        {**good, "s": "2" * 16, "b": -5, "e": 10},
        {**good, "s": "3" * 16, "b": 10**30, "e": 10**30 + 1},
        {**good, "s": "4" * 16, "b": "soon", "e": None},
        {**good, "s": "5" * 16, "b": 2_000, "e": 5_000},
        {**good, "s": "6" * 16, "b": 8 * 10**18, "e": 8 * 10**18 + 1},
        {**good, "s": "7" * 16, "b": t0 + 5_000, "e": t0 + 2_000},
        {**good, "s": "8" * 16, "b": None},
    ]
    (run / "spans-driver-0-1.jsonl").write_text("\n".join(json.dumps(r) for r in [header, good, *odd]) + "\n")
    out = lens("goodput", "--json", str(tmp_path / "store"))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["skipped_lines"] == len(odd) and json.loads(out.stdout)["spans"] == 1
    out = lens("report", str(tmp_path / "store"), "-o", str(tmp_path / "r.html"))
    assert out.returncode == 0, out.stderr
    for target in (tmp_path / "t.json", tmp_path / "t.pftrace"):
        out = lens("perfetto", str(tmp_path / "store"), "-o", str(target))
        assert out.returncode == 0, out.stderr
        assert "1 spans" in out.stdout
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert [e["args"]["span_id"] for e in events if e["ph"] == "X"] == ["1" * 16]


@pytest.mark.slow
def test_lines_of_other_json_types_are_skipped_and_odd_values_read_as_none_in_every_tool(tmp_path: Path) -> None:
    """A span line whose keys have other JSON types than the store's (a list for a name, text for the
    attributes, ...) or that has no name is skipped and counted; attribute values no tool can use (a
    list bucket, a step past 64 bits, a token count past any float) read as none; ids no OTLP span can
    carry are skipped by replay. Goodput, the report, both Perfetto formats and replay all finish."""
    run = tmp_path / "store" / "run"
    run.mkdir(parents=True)
    header = {"v": 2, "header": True, "resource": {"rl.worker_group": "driver", "nv.dl.rank": 0, "process.pid": 1}}
    good = {"n": "generation", "t": "a" * 32, "s": "1" * 16, "b": EPOCH_NS + 2_000, "e": EPOCH_NS + 5_000}
    good["a"] = {"rl.bucket": "productive"}
    bad_types = [
        {"n": [1]},
        {"n": None},
        {"t": 5},
        {"p": [1]},
        {"p": {"x": 1}},
        {"a": [1, 2]},
        {"a": "text"},
        {"th": 1.5},
        {"tn": {"x": 1}},
        {"k": [2]},
        {"st": 3},
        {"sm": []},
        {"ev": "x"},
        {"ev": [1]},
        {"ln": {"a": 1}},
        {"sc": True},
    ]
    odd_values = [
        {"rl.bucket": ["productive"], "rl.step": [1]},
        {"rl.bucket": {"a": 1}, "rl.step": 2**70},
        {"rl.num_tokens": 10**400, "rl.step": -(2**70)},
        {"rl.num_tokens": "many", "x": 2**70},
    ]
    lines = [header, good]
    lines += [{**good, "s": f"{i + 2:016x}", **bad} for i, bad in enumerate(bad_types)]
    lines += [{**good, "s": f"{i + 100:016x}", "a": a} for i, a in enumerate(odd_values)]
    lines += [{**good, "s": "f" * 20}, {**good, "s": "e" * 16, "t": "not hex"}]  # the reader keeps them; OTLP cannot
    v1 = {"v": 1, "name": "old", "span_id": "d" * 16, "trace_id": "a" * 32, "start_ns": 1, "end_ns": 2, "resource": {}}
    lines += [{**v1, "events": [1]}, {**v1, "span_id": "c" * 16, "name": None}, {**v1, "span_id": "b" * 16, "kind": 3}]
    (run / "spans-driver-0-1.jsonl").write_text("\n".join(json.dumps(r) for r in lines) + "\n")
    skipped = len(bad_types) + 3
    kept = 1 + len(odd_values) + 2
    out = lens("goodput", "--json", str(tmp_path / "store"))
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["skipped_lines"] == skipped and report["spans"] == kept
    assert lens("goodput", str(tmp_path / "store")).returncode == 0
    out = lens("report", str(tmp_path / "store"), "-o", str(tmp_path / "r.html"))
    assert out.returncode == 0, out.stderr
    for target in (tmp_path / "t.json", tmp_path / "t.pftrace"):
        out = lens("perfetto", str(tmp_path / "store"), "-o", str(target))
        assert out.returncode == 0, out.stderr
        assert f"{kept} spans" in out.stdout
    events = [e for e in json.loads((tmp_path / "t.json").read_text())["traceEvents"] if e["ph"] == "X"]
    assert {e["cat"] for e in events} == {"productive", "phase"}  # a bucket that is no text: no category
    with OTLPReceiver() as rx:
        out = lens("replay", str(tmp_path / "store"), "--otlp", rx.endpoint)
        assert out.returncode == 0, out.stderr
        assert f"replayed {kept - 2} spans" in out.stdout and f"({skipped + 2} bad lines skipped)" in out.stdout
        assert rx.wait_for_spans(kept - 2, 5)
        assert {s["attributes"].get("x") for s in rx.spans} == {None, str(2**70)}  # made OTLP-legal, as when recorded


def test_replay_sends_the_stored_trace(traced_run: Path) -> None:
    """replay re-exports stored spans with their ids to a collector, its endpoint's password never printed."""
    with OTLPReceiver() as rx:
        out = lens("replay", str(traced_run), "--otlp", rx.endpoint.replace("://", "://alice:hunter2@"))
        assert out.returncode == 0, out.stderr
        assert "hunter2" not in out.stdout and "[REDACTED]@" in out.stdout  # (SPEC "Secrets": never said)
        assert rx.wait_for_spans(7, 5)
        names = sorted(s["name"] for s in rx.spans)
    assert names.count("generation") == 2 and "rl.job" in names
    assert len({s["trace_id"] for s in rx.spans}) == 1


@pytest.mark.parametrize(
    "args, said",
    [
        (["--otlp", "alice:hunter2@127.0.0.1:9"], "--otlp: invalid endpoint '[REDACTED]@127.0.0.1:9'; allowed:"),
        (["--otlp", "http://127.0.0.1:9", "--timeout-ms", "0"], "--timeout-ms: 0 is not a duration; allowed:"),
        (["--otlp", "http://127.0.0.1:9", "--timeout-ms", "-5"], "--timeout-ms: -5 is not a duration; allowed:"),
    ],
)
def test_replay_refuses_a_bad_endpoint_or_timeout_as_usage(traced_run: Path, args: list[str], said: str) -> None:
    """An endpoint without a scheme (its password masked, never echoed) or a timeout not > 0: exit 2, one line
    naming the option and what is allowed."""
    out = lens("replay", str(traced_run), *args)
    assert out.returncode == 2 and said in out.stderr, out.stderr
    assert "hunter2" not in out.stdout + out.stderr and "Traceback" not in out.stderr


def test_replay_never_says_a_badly_formed_header_entry(traced_run: Path) -> None:
    """``OTEL_EXPORTER_OTLP_HEADERS="x-team: KEY"`` (a colon for '='), read by the exporter replay uses: its
    warning, which replay quotes, comes without the entry."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "lens_rl",
            "replay",
            str(traced_run),
            "--otlp",
            refused_endpoint(),
            "--timeout-ms",
            "500",
        ],
        capture_output=True,
        text=True,
        env=clean_env({"OTEL_EXPORTER_OTLP_HEADERS": "x-team: s3cr3tKEY"}),
        timeout=120,
    )
    assert out.returncode != 0 and "did not accept the spans" in out.stderr, out.stderr
    assert "s3c" not in out.stdout + out.stderr


def test_python_dash_m_works_like_the_command() -> None:
    """`python -m lens_rl --help` lists the subcommands."""
    out = lens("--help")
    assert out.returncode == 0 and all(c in out.stdout for c in ("demo", "goodput", "perfetto", "replay"))


@pytest.mark.slow
def test_users_can_assert_their_spans_with_the_plugin_fixture(tmp_path: Path) -> None:
    """A user's own test file gets the lens_spans fixture from the installed pytest plugin."""
    (tmp_path / "test_user.py").write_text(
        "from lens_rl import traced_phase\n"
        "def test_mine(lens_spans):\n"
        "    with traced_phase('generation', step=2):\n"
        "        pass\n"
        "    span = lens_spans.find('generation')\n"
        "    assert span.attributes['rl.bucket'] == 'productive' and span.attributes['rl.step'] == 2\n"
        "def test_reset_after(lens_spans):\n"
        "    assert lens_spans.spans == []\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        env=clean_env(),
        cwd=tmp_path,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 passed" in out.stdout


def test_version_and_help_without_a_command() -> None:
    """--version prints the version; no command prints help and exits 2."""
    import lens_rl

    out = lens("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"lens-rl {lens_rl.__version__}"
    out = lens()
    assert out.returncode == 2 and "usage: lens-rl" in out.stderr and "goodput" in out.stderr


def test_goodput_json_has_the_readable_fields(traced_run: Path) -> None:
    """--json carries both headline figures, step time, phases and stragglers; --steps cuts a window."""
    report = json.loads(lens("goodput", str(traced_run), "--json").stdout)
    for key in ("steady_state_goodput", "step_time", "slowest_steps", "phases", "stragglers", "files", "skipped_lines"):
        assert key in report
    assert report["files"] >= 1 and report["skipped_lines"] == 1
    window = json.loads(lens("goodput", str(traced_run), "--json", "--steps", "2-2").stdout)
    assert [s["step"] for s in window["steps"]] == [2]
    bad = lens("goodput", str(traced_run), "--steps", "3-1")
    assert bad.returncode == 2 and "--steps" in bad.stderr and "Traceback" not in bad.stderr


def test_perfetto_defaults_to_trace_json_with_named_threads_and_flows(tmp_path: Path) -> None:
    """Without -o the Chrome JSON lands in TRACE_DIR/trace.json; threads are named; a span whose parent ran in
    another process gets a flow arrow, whatever the form of the ids."""
    from tests.stores import write_received

    out = run_python(
        f"""
        import lens_rl, threading
        from concurrent.futures import ThreadPoolExecutor
        lens_rl.init_telemetry_driver({{"telemetry": {{"enabled": True, "trace_dir": {str(tmp_path)!r},
                                       "run_id": "r"}}}}, "grpo")
        with lens_rl.traced_phase("step", step=1):
            carrier = lens_rl.inject_context()
            with ThreadPoolExecutor(1) as pool:
                pool.submit(lambda: lens_rl.traced_phase("reward")(lambda: None)()).result()
        lens_rl.shutdown_telemetry(3000)
        """
    )
    assert out.returncode == 0, out.stderr
    res = lens("perfetto", str(tmp_path / "r"))
    assert res.returncode == 0, res.stderr
    doc = json.loads((tmp_path / "r" / "trace.json").read_text())
    names = {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name"}
    assert "MainThread" in names and any(n.startswith("ThreadPoolExecutor-") for n in names)
    worker = {
        "name": "generation",
        "span_id": "w1",
        "parent_span_id": "d1",
        "trace_id": "t" * 32,
        "start_ns": 5,
        "end_ns": 9,
        "attributes": {},
        "resource": {"rl.worker_group": "vllm", "nv.dl.rank": 0, "process.pid": 2},
    }
    caller = {
        **worker,
        "name": "step",
        "span_id": "d1",
        "parent_span_id": None,
        "start_ns": 0,
        "end_ns": 20,
        "attributes": {"rl.bucket": "idle"},
        "resource": {"rl.worker_group": "driver", "nv.dl.rank": 0, "process.pid": 1},
    }
    for name, spans in (
        ("text", [caller, worker]),
        ("numbers", [{**caller, "span_id": 7}, {**worker, "span_id": 8, "parent_span_id": 7}]),
    ):
        run = write_received(spans, tmp_path / name)
        assert lens("perfetto", str(run), "-o", str(run / "t.json")).returncode == 0
        events = json.loads((run / "t.json").read_text())["traceEvents"]
        flows = [e for e in events if e["ph"] in "sf"]
        assert sorted(e["ph"] for e in flows) == ["f", "s"] and flows[0]["pid"] != flows[1]["pid"]
        assert {e["id"] for e in flows} == {flows[0]["id"]}
        assert [e["cat"] for e in events if e["ph"] == "X" and e["name"] == "step"] == ["idle"]


def test_odd_input_gets_clear_words(traced_run: Path, tmp_path: Path) -> None:
    """A missing path says it does not exist; --steps outside the run names the run's steps; an output of
    no trace format is refused, naming the allowed ones; the format written is named."""
    out = lens("goodput", str(tmp_path / "nowhere"))
    assert out.returncode == 2 and "does not exist" in out.stderr and "Traceback" not in out.stderr
    out = lens("goodput", str(traced_run), "--steps", "50-60")
    assert out.returncode == 2 and "--steps 50-60 selects no step: the run's steps are 1-2" in out.stderr
    out = lens("report", str(traced_run), "--steps", "50-60", "-o", str(tmp_path / "r.html"))
    assert out.returncode == 2 and "selects no step" in out.stderr
    out = lens("perfetto", str(traced_run), "--group", "nope", "-o", str(tmp_path / "g.json"))
    assert out.returncode == 2 and "--group nope selects no span of" in out.stderr, out.stderr
    out = lens("perfetto", str(traced_run), "-o", str(tmp_path / "x.txt"))
    assert out.returncode == 2 and ".json (Chrome trace-event JSON)" in out.stderr and not (tmp_path / "x.txt").exists()
    out = lens("perfetto", str(traced_run), "-o", str(tmp_path / "x.pftrace"))
    assert out.returncode == 0 and "(Perfetto protobuf)" in out.stdout


def test_files_of_several_runs_in_one_folder_are_named(traced_run: Path, tmp_path: Path) -> None:
    """Files of two runs copied into one folder: a warning names both runs, and the table's note too."""
    import shutil

    mixed = tmp_path / "mixed"
    shutil.copytree(traced_run / "run1", mixed)
    from tests.stores import span, write_process

    write_process(mixed, "lm_policy", 0, 99, [span("train", 0, 1, "x", bucket="productive")], run="other")
    out = lens("goodput", str(mixed))
    assert out.returncode == 0 and "holds spans of 2 runs (other, run1)" in out.stderr
    assert "2 runs in one folder" in out.stdout


def test_a_look_runs_with_the_cyclic_collector_paused_and_leaves_it_as_it_was(
    traced_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``goodput`` builds objects that live until it ends: no collection runs while it reads (not even the
    imports'), its answer is the same, and the collector is back on after."""
    import gc

    from lens_rl.cli.parser import build_parser

    args = build_parser().parse_args(["goodput", str(traced_run), "--json", "--no-cache"])
    collections: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    gc.callbacks.append(count)
    try:
        assert args.func(args) == 0
    finally:
        gc.callbacks.remove(count)
    assert collections == [] and gc.isenabled()
    assert json.loads(capsys.readouterr().out)["schema"] == "lens_rl.goodput/1"


def test_json_output_names_a_key_that_is_not_text_as_text(capsys: pytest.CaptureFixture[str]) -> None:
    """``--json`` prints a report whose keys are all text as it always did, and one with a key that is not (a
    step's number) with that key as text, not an error."""
    import orjson

    from lens_rl.cli.commands import _print_json

    for report in ({"steps": [{"step": 1, "a": None}], "b": 1.5}, {"by_step": {1: 2.0, "x": 3}}):
        _print_json(report)
        expected = orjson.dumps(report, default=str, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
        assert capsys.readouterr().out == expected.decode() + "\n"


def test_a_reading_command_starts_no_blas_threads_and_a_job_keeps_the_users_environment(
    traced_run: Path, tmp_path: Path
) -> None:
    """A look loads numpy without OpenBLAS's pool (one thread a core, never used to read), unless the user set
    its size; ``lens-rl run`` hands the job the environment as the user gave it."""
    look = f"""
        import os, sys
        from lens_rl.cli import main
        sys.stdout = open(os.devnull, "w")
        seen = []
        import lens_rl.cli.parser as parser
        goodput = parser.cmd_goodput
        parser.cmd_goodput = lambda args: seen.append(os.environ.get("OPENBLAS_NUM_THREADS", "unset")) or goodput(args)
        assert main(["goodput", {str(traced_run)!r}, "--json"]) == 0
        sys.stderr.write(seen[0] + " " + os.environ.get("OPENBLAS_NUM_THREADS", "unset"))
        """
    assert "OPENBLAS_NUM_THREADS" not in clean_env()  # (what a user who never set it has)
    assert run_python(look).stderr.endswith("1 unset")  # (set for the look only)
    assert run_python(look, env={"OPENBLAS_NUM_THREADS": "4"}).stderr.endswith("4 4")
    job = [sys.executable, "-c", "import os; print(os.environ.get('OPENBLAS_NUM_THREADS', 'unset'))"]
    out = lens("run", "--trace-dir", str(tmp_path), "--", *job)
    assert out.returncode == 0 and out.stdout.strip().splitlines()[-1] == "unset", out.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["watch", "{run}", "--interval", "nan"],
        ["watch", "{run}", "--interval", "inf"],
        ["watch", "{run}", "--interval", "1e300"],
        ["watch", "{run}", "--interval", "0"],
        ["profile", "{run}", "--timeout", "inf"],
        ["report", "{run}", "--warmup-steps", "-2", "-o", "{tmp}/r.html"],
        ["goodput", "{run}", "--warmup-steps", "-1"],
    ],
    ids=lambda args: " ".join(args[2:4]),
)
def test_a_bad_duration_or_count_is_one_line_naming_it_and_exit_2(
    traced_run: Path, tmp_path: Path, args: list[str]
) -> None:
    """A duration that is no finite number of seconds > 0, or a negative count, is refused before anything
    runs: one line naming the option, the value and what is allowed, exit 2, no page written."""
    out = lens(*(a.format(run=traced_run, tmp=tmp_path) for a in args))
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert args[2] in line and "allowed:" in line
    assert not (tmp_path / "r.html").exists()


def test_perfetto_names_each_file_it_skips_as_goodput_does(traced_run: Path, tmp_path: Path) -> None:
    """A file of another shape (a 0.x line first, garbage) beside the run's files: perfetto writes the trace
    and names each skipped file once on stderr, as goodput does (SPEC "Scale": one message naming it)."""
    run = tmp_path / "run"
    shutil.copytree(traced_run, run)  # (the module's run stays as it is)
    (run / "spans-old-0-1.jsonl").write_text('{"v": 1, "name": "step", "span_id": "aaaaaaaaaaaaaaaa"}\n')
    (run / "spans-junk-0-2.jsonl").write_text("garbage\n")
    good = lens("goodput", str(run))
    out = lens("perfetto", str(run), "-o", str(tmp_path / "t.json"))
    assert out.returncode == 0 and good.returncode == 0, out.stderr
    for name in ("spans-old-0-1.jsonl", "spans-junk-0-2.jsonl"):
        assert out.stderr.count(f"{name}: not a lens_rl store file") == 1, out.stderr
        assert f"{name}: not a lens_rl store file" in good.stdout + good.stderr


def test_a_missing_run_names_the_runs_there_never_the_cache_folder(traced_run: Path, tmp_path: Path) -> None:
    """--run of a run not there names the folders that hold runs: the refresh cache's folder, which a look at
    a run folder leaves in it, is none."""
    run = tmp_path / "traces" / "r1"
    shutil.copytree(traced_run / "run1", run)
    assert lens("goodput", str(run)).returncode == 0 and (run / ".lens_rl-cache").is_dir()
    out = lens("goodput", str(run), "--run", "nope")
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    assert "(runs: none)" in out.stderr and ".lens_rl-cache" not in out.stderr
    out = lens("goodput", str(tmp_path / "traces"), "--run", "nope")
    assert out.returncode == 2 and "(runs: r1)" in out.stderr
