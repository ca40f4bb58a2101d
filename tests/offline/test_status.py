"""``lens-rl status`` on hand-written heartbeats: running, stale, ended, HUNG; the innermost open phase against
its usual p95 and longest; earlier attempts apart; workers reaped with their driver; 2,000 processes
summarised by group with the abnormal ones listed, in well under a second; the exit status; a process whose
pid is dead on this host stale at once, and no open phase on a process that is not running."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from lens_rl.offline.show.status import format_status, run_status
from lens_rl.store import process_mark
from tests.conftest import lens

NOW = 2_000_000_000 * 10**9


def beat(
    run: Path,
    group: str,
    rank: int,
    pid: int,
    *,
    age_s: float = 0.1,
    state: str = "running",
    attempt: int = 0,
    open_phases: list[dict[str, Any]] | None = None,
    step: int | None = 7,
    interval_ms: int = 1000,
    proc: dict[str, Any] | None = None,
) -> Path:
    """One heartbeat file as a process writes it, ``age_s`` before NOW."""
    run.mkdir(parents=True, exist_ok=True)
    content = {
        "v": 1,
        "format": "lens_rl.live/1",
        "kind": "live",
        "role": "driver" if group == "driver" else "worker",
        "resource": {
            "rl.worker_group": group,
            "nv.dl.rank": rank,
            "host.name": "node1",
            "rl.attempt": attempt,
            "rl.run_id": run.name,
        },
        "pid": pid,
        "written_ns": NOW - int(age_s * 1e9),
        "interval_ms": interval_ms,
        "hang_timeout_s": 600,
        "state": state,
        "open": open_phases or [],
        "last_step": None if step is None else {"step": step, "goodput": 0.5},
        "phases": {"policy_training": {"count": 7, "max_s": 11.0, "p95_s": 10.1}},
        "hangs": sum(1 for p in open_phases or [] if p.get("hang")),
        "stats": {},
    }
    if proc is not None:
        content["proc"] = proc
    path = run / f"live-{group}-{rank}-{pid}.json"
    path.write_text(json.dumps(content))
    return path


def phase(name: str, open_s: float, *, step: int = 8, hung: bool = False) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": name, "step": step, "bucket": "productive", "start_ns": NOW - int(open_s * 1e9)}
    if hung:
        entry["hang"] = {"age_s": open_s, "timeout_s": 600}
    return entry


def test_each_process_is_running_stale_ended_or_hung(tmp_path: Path) -> None:
    """Stale past 3 intervals; the innermost open phase shown with its p95 and longest; not ok when a
    process is stale or hung."""
    run = tmp_path / "r"
    beat(run, "driver", 0, 1, open_phases=[phase("step", 12.5), phase("policy_training", 12.0)])
    beat(run, "lm_policy", 0, 10, open_phases=[phase("policy_training", 11.9)])
    beat(run, "lm_policy", 1, 11, open_phases=[phase("policy_training", 900, hung=True)])
    beat(run, "lm_policy", 2, 12, age_s=3.5)  # three intervals and a half
    beat(run, "vllm_policy", 0, 20, state="ended")
    report = run_status(run, NOW)
    rows = {(r["worker_group"], r["rank"]): r for r in report["processes"]}
    assert [r["worker_group"] for r in report["processes"]][0] == "driver" and report["driver_step"] == 8
    assert rows[("lm_policy", 0)]["state"] == "running" and not rows[("lm_policy", 0)]["hung"]
    assert rows[("lm_policy", 1)]["hung"] and rows[("lm_policy", 1)]["phase"]["open_s"] == 900
    assert rows[("lm_policy", 2)]["state"] == "stale" and rows[("vllm_policy", 0)]["state"] == "ended"
    shown = rows[("driver", 0)]["phase"]
    assert (shown["name"], shown["open_s"], shown["p95_s"], shown["max_s"]) == ("policy_training", 12.0, 10.1, 11.0)
    assert not report["ok"]
    groups = {g["worker_group"]: g for g in report["groups"]}
    assert groups["lm_policy"] == {
        "worker_group": "lm_policy",
        "processes": 3,
        "running": 2,
        "stale": 1,
        "ended": 0,
        "unreadable": 0,
        "hung": 1,
        "min_step": 7,
        "max_step": 8,
    }
    text = format_status(report)
    assert "NOT OK" in text and "policy_training 900.0s / 10.1s / 11.0s  HUNG" in text
    assert "1 stale" in text and "1 HUNG" in text


def test_earlier_attempts_are_apart_and_workers_reaped_with_their_driver_ended(tmp_path: Path) -> None:
    """A killed attempt's heartbeats are not stale processes of the job now; a worker whose heartbeats stopped
    when its driver ended (Ray kills its workers) ended with the job; one that stopped well before is stale."""
    run = tmp_path / "r"
    beat(run, "driver", 0, 1, attempt=0, age_s=500)
    beat(run, "lm_policy", 0, 2, attempt=0, age_s=500)
    beat(run, "driver", 0, 3, attempt=1, state="ended", age_s=10)
    beat(run, "lm_policy", 0, 4, attempt=1, age_s=10.5)
    beat(run, "lm_policy", 1, 5, attempt=1, age_s=60)
    report = run_status(run, NOW)
    assert report["attempt"] == 1 and report["superseded"] == 2
    states = {r["rank"]: r["state"] for r in report["processes"] if r["worker_group"] == "lm_policy"}
    assert states == {0: "ended", 1: "stale"}
    assert "2 heartbeat(s) of earlier attempts not counted" in format_status(report)


def test_a_healthy_run_is_ok_and_garbage_files_are_named(tmp_path: Path) -> None:
    run = tmp_path / "r"
    beat(run, "driver", 0, 1)
    (run / "live-x-0-9.json").write_text("{not json")
    (run / "live-y-0-9.json").write_text(json.dumps({"format": "other"}))
    report = run_status(run, NOW)
    assert report["ok"] and len(report["processes"]) == 1
    assert [n.split(":")[0] for n in report["notes"]] == ["live-x-0-9.json", "live-y-0-9.json"]


def test_status_names_entries_it_cannot_read_on_stderr_not_in_its_output(tmp_path: Path) -> None:
    """A heartbeat entry that is a FIFO or garbage is named in one line each on stderr; the table on stdout (what
    a script parses) holds none of them, and the run stays ok."""
    run = tmp_path / "r"
    beat(run, "driver", 0, 1)
    os.mkfifo(run / "live-x-0-9.json")
    (run / "live-y-0-9.json").write_text("{not json")
    out = lens("status", str(run), timeout=60)
    assert out.returncode == 0, out.stderr
    assert "live-x-0-9.json" not in out.stdout and "live-y-0-9.json" not in out.stdout, out.stdout
    named = [line for line in out.stderr.splitlines() if "live-" in line]
    assert len(named) == 2 and "FIFO" in named[0] and "live-y-0-9.json" in named[1], out.stderr


def test_a_process_with_no_step_yet_reads_a_dash_not_none(tmp_path: Path) -> None:
    """A worker whose heartbeat has no step yet shows ``-`` in its row's step column, as the driver's line does."""
    run = tmp_path / "r"
    beat(run, "driver", 0, 1)
    beat(run, "actor", 0, 2, step=None)
    text = format_status(run_status(run, NOW))
    row = next(line for line in text.splitlines() if line.startswith("actor") and " 2 " in line)
    assert "None" not in text
    assert row.split()[5:8] == ["running", "0.1s", "-"]


def test_two_thousand_processes_are_summarised_by_group(tmp_path: Path) -> None:
    """2,000 heartbeats (one stale, one hung) make a short table: the groups, then only the two abnormal
    processes (its time: benchmarks/test_speed.py)."""
    run = tmp_path / "r"
    beat(run, "driver", 0, 1)
    for rank in range(1999):
        group = "lm_policy" if rank < 1500 else "vllm_policy"
        opened = [phase("policy_training", 900, hung=True)] if rank == 1234 else [phase("policy_training", 5)]
        beat(run, group, rank, 100 + rank, age_s=30 if rank == 77 else 0.2, open_phases=opened)
    report = run_status(run, NOW)
    text = format_status(report)
    assert len(report["processes"]) == 2000 and not report["ok"]
    lines = text.splitlines()
    assert len(lines) < 20, text
    assert "abnormal processes (2 of 2000" in text
    assert any(" 1234 " in line and "HUNG" in line for line in lines)
    assert any("    77 " in line and "stale" in line for line in lines)


def test_the_command_exits_1_on_trouble_and_says_when_there_is_no_heartbeat(tmp_path: Path) -> None:
    """Exit 0 when all is well, 1 when a process is stale or hung, 2 (one line) when there are no
    heartbeat files or none can be read; --json is the report."""
    good, bad = tmp_path / "good", tmp_path / "bad"
    now_age = (time.time_ns() - NOW) / 1e9
    beat(good / "r1", "driver", 0, 1, age_s=-now_age)  # written just now
    beat(bad / "r1", "driver", 0, 1, age_s=-now_age + 100)  # 100 s ago: stale

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "lens_rl", "status", *args], capture_output=True, text=True)

    assert run(str(good)).returncode == 0
    out = run(str(bad), "--json")
    assert out.returncode == 1 and json.loads(out.stdout)["schema"] == "lens_rl.status/1"
    empty = run(str(tmp_path / "none_here"))
    assert empty.returncode == 2 and empty.stderr.count("\n") == 1 and "does not exist" in empty.stderr
    unreadable = tmp_path / "unreadable" / "r"
    unreadable.mkdir(parents=True)
    (unreadable / "live-x-0-9.json").write_text("{not json")
    _malformed(unreadable, "pid", "seven")
    out = run(str(unreadable))
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "no readable lens_rl heartbeat" in out.stderr
    (tmp_path / "spans_only" / "r").mkdir(parents=True)
    none = run(str(tmp_path / "spans_only"))
    assert none.returncode == 2 and "no lens_rl heartbeat files (live-*.json)" in none.stderr


_WRONG = {  # a heartbeat's field (dotted: inside it) -> values of a JSON type the format does not give it
    "resource": [[], "x", 3, None],
    "pid": ["7", 1.5, [], True, 2**70],
    "role": [1, [], {}],
    "state": [1, [], {}, True],
    "written_ns": ["now", 1.5, [], {}, 2**70],
    "interval_ms": ["1000", [], {}, True, -5, 0, 1e308, 1000.0, 86_400_001],
    "open": [{}, "x", 3, [1], [[]]],
    "last_step": [[], "x", 3, {"step": []}, {"step": 1.5}],
    "phases": [[], "x", {"policy_training": []}, {"policy_training": {"p95_s": "x"}}],
    "hangs": ["1", 1.5, []],
    "resource.rl.worker_group": [1, [], {}, None],
    "resource.nv.dl.rank": ["0", 1.5, [], 2**64],
    "resource.host.name": [1, []],
    "resource.rl.attempt": ["0", 1.5, {}],
    "open.name": [1, [], {}],
    "open.step": [[], {}, 1.5],
    "open.start_ns": ["x", 1.5, [], 2**70],
    "open.age_s": ["x", [], {}],
    "open.timeout_s": ["x", []],
    "open.hang": ["x", 3, []],
}


def _malformed(run: Path, field: str, value: Any) -> Path:
    path = beat(run, "lm_policy", 1, 11, open_phases=[phase("policy_training", 5)])
    content = json.loads(path.read_text())
    where, _, key = field.partition(".")
    if where == "resource" and key:
        content["resource"][key] = value
    elif where == "open" and key:
        content["open"][0][key] = value
    else:
        content[field] = value
    path.write_text(json.dumps(content))
    return path


def test_a_heartbeat_field_of_the_wrong_type_is_a_note_and_an_unreadable_row(tmp_path: Path) -> None:
    """Every field of a heartbeat, given several values of a wrong JSON type (or an integer past 64 bits):
    the status is read, its table and JSON written, that file named in a note and its process's row
    ``unreadable``; the healthy driver beside it is read as before and the run stays ok."""
    import orjson

    for n, (field, values) in enumerate(_WRONG.items()):
        for m, value in enumerate(values):
            run = tmp_path / f"r{n}-{m}"
            beat(run, "driver", 0, 1)
            bad = _malformed(run, field, value)
            report = run_status(run, NOW)
            rows = {r["pid"]: r for r in report["processes"]}
            assert rows[1]["state"] == "running" and report["ok"], (field, value)
            assert any(r["state"] == "unreadable" for r in report["processes"]), (field, value)
            assert any(note.startswith(bad.name) and "malformed" in note for note in report["notes"]), (field, value)
            assert "unreadable" in format_status(report) and orjson.dumps(report)


def test_the_commands_read_malformed_heartbeats_without_a_traceback(tmp_path: Path) -> None:
    """status and watch --once on a run whose worker heartbeats have fields of the wrong type: exit 0 (the
    driver is running), the rows say unreadable, no traceback."""
    run = tmp_path / "r"
    now_age = (time.time_ns() - NOW) / 1e9
    # (a long interval: three commands in a row on a loaded machine must not find the driver stale)
    beat(run, "driver", 0, 1, age_s=-now_age, interval_ms=600_000)
    for n, (field, values) in enumerate(_WRONG.items()):
        path = _malformed(run, field, values[0])
        path.rename(run / f"live-lm_policy-{n}-{100 + n}.json")
    for command in (["status"], ["status", "--json"], ["watch", "--once"]):
        out = subprocess.run(
            [sys.executable, "-m", "lens_rl", *command, str(run)], capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
        assert "unreadable" in out.stdout or command[0] == "watch"


def test_a_dead_process_with_an_absurd_interval_is_unreadable_and_the_status_is_not_ok(tmp_path: Path) -> None:
    """A driver silent for 10 minutes whose heartbeat says interval_ms 0, 1e308 or 1000.0 never reads
    ``running``: its row is unreadable, a note names interval_ms, and ``status`` exits non-zero (2: no readable
    heartbeat), never 0."""
    for name, interval in (("zero", 0), ("huge", 1e308), ("float", 1000.0)):
        run = tmp_path / name / "r"
        path = beat(run, "driver", 0, 1, age_s=(time.time_ns() - NOW) / 1e9 + 600)
        content = json.loads(path.read_text())
        content["interval_ms"] = interval
        path.write_text(json.dumps(content))
        report = run_status(run)
        assert [r["state"] for r in report["processes"]] == ["unreadable"], name
        assert any("interval_ms" in note for note in report["notes"]), report["notes"]
        out = subprocess.run(
            [sys.executable, "-m", "lens_rl", "status", str(run)], capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 2 and "interval_ms" in out.stderr and "Traceback" not in out.stderr, name


def test_a_clock_ahead_is_judged_by_the_files_time(tmp_path: Path) -> None:
    """A heartbeat dated an hour ahead of the reader's clock is judged by its file's modification time and
    its row says ``clock ahead``: written just now, it is running; its file an hour old, it is stale and
    ``status`` exits 1."""
    import os

    now = time.time_ns()
    for name, file_age_s, state, code in (("fresh", 0, "running", 0), ("dead", 3600, "stale", 1)):
        run = tmp_path / name / "r"
        path = beat(run, "driver", 0, 1, age_s=-(now - NOW) / 1e9 - 3600, interval_ms=10_000)
        os.utime(path, ns=(now - file_age_s * 10**9, now - file_age_s * 10**9))
        report = run_status(run)
        (row,) = report["processes"]
        assert row["state"] == state and row["clock_ahead"], row
        assert "clock ahead" in format_status(report)
        out = subprocess.run([sys.executable, "-m", "lens_rl", "status", str(run)], capture_output=True, text=True)
        assert out.returncode == code and "clock ahead" in out.stdout, out.stdout + out.stderr


def test_a_process_gone_from_this_host_is_stale_at_once_and_shows_no_open_phase(tmp_path: Path) -> None:
    """A fresh heartbeat (0.1 s old, 1 s interval) whose writer is dead on this host (its mark: this boot, this
    pid namespace) is stale at once, pid gone: no open phase, not hung, ``last_phase`` where it was; the same
    heartbeat while its writer lives is unchanged (running, its phase open, HUNG). Another process under the
    pid (another start time) is gone too; a mark of another boot says nothing (the age decides). An ended or
    stale process shows no open phase either."""
    says_its_mark = "import json; from lens_rl.store import process_mark; print(json.dumps(process_mark())); input()"
    child = subprocess.Popen(
        [sys.executable, "-c", says_its_mark], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        mark = json.loads(child.stdout.readline())
        own = process_mark()
        assert mark is not None and own is not None
        run = tmp_path / "r"
        beat(run, "driver", 0, os.getpid(), proc=own, open_phases=[phase("step", 6.0)])
        beat(run, "lm_policy", 0, child.pid, proc=mark, open_phases=[phase("policy_training", 5.0, hung=True)])
        beat(run, "lm_policy", 1, child.pid, proc={**mark, "boot": "another-boot"}, open_phases=[phase("gen", 1.0)])
        beat(run, "lm_policy", 2, os.getpid(), proc={**own, "start": own["start"] - 1}, open_phases=[phase("gen", 1.0)])
        beat(run, "lm_policy", 3, 13, state="ended", open_phases=[phase("gen", 2.0)])
        beat(run, "lm_policy", 4, 14, age_s=3.5, open_phases=[phase("gen", 2.0, hung=True)])
        alive = {r["rank"]: r for r in run_status(run, NOW)["processes"] if not r["driver"]}
        assert alive[0]["state"] == "running" and alive[0]["hung"] and alive[0]["phase"]["name"] == "policy_training"
        assert not alive[0]["gone"] and alive[0]["last_phase"] is None
    finally:
        child.kill()
        child.wait()
    report = run_status(run, NOW)
    rows = {r["rank"] if not r["driver"] else "driver": r for r in report["processes"]}
    assert rows["driver"]["state"] == "running" and rows["driver"]["phase"]["name"] == "step"
    assert not rows["driver"]["gone"]
    killed = rows[0]
    assert killed["state"] == "stale" and killed["gone"] and killed["phase"] is None and not killed["hung"]
    assert killed["open_phases"] == 0 and killed["last_phase"] == {"name": "policy_training", "step": 8, "open_s": 4.9}
    assert rows[1]["state"] == "running" and not rows[1]["gone"] and rows[1]["phase"]["name"] == "gen"
    assert rows[2]["state"] == "stale" and rows[2]["gone"] and rows[2]["phase"] is None
    for rank, state in ((3, "ended"), (4, "stale")):
        assert rows[rank]["state"] == state and not rows[rank]["gone"], rows[rank]
        assert rows[rank]["phase"] is None and not rows[rank]["hung"] and rows[rank]["last_phase"]["name"] == "gen"
    assert not report["ok"]
    text = format_status(report)
    assert "- (last seen in policy_training, open 4.9s)  pid gone" in text and "HUNG" not in text


def test_a_heartbeat_dated_outside_the_plausible_years_is_a_note_and_an_unreadable_row(tmp_path: Path) -> None:
    """written_ns 1 (1970) and one in the year 2500 (past 64 bits): as the store's plausible-time rule says,
    the file is named with why in a note and its row is ``unreadable``; 1970 was taken at face value (stale
    for 57 years, exit 1, no note) and 2500 was said to have "the wrong JSON type"."""
    for name, written in (("1970", 1), ("2500", 16_725_225_600 * 10**9)):
        run = tmp_path / name / "r"
        beat(run, "driver", 0, 1)
        path = beat(run, "lm_policy", 0, 4242)
        content = json.loads(path.read_text())
        content["written_ns"] = written
        path.write_text(json.dumps(content))
        report = run_status(run, NOW)
        rows = {r["pid"]: r for r in report["processes"]}
        assert rows[4242]["state"] == "unreadable" and rows[4242]["heartbeat_age_s"] is None, name
        assert report["ok"] and rows[1]["state"] == "running", name
        (note,) = report["notes"]
        assert note.startswith(path.name) and f"written_ns {written} is outside the plausible years" in note, note


def test_a_heartbeat_is_judged_by_the_interval_a_writer_keeps(tmp_path: Path) -> None:
    """A heartbeat that says interval_ms 10 (written so before writers said the interval they keep) is
    rewritten at most every 50 ms: 0.1 s old it is running, not stale; 0.2 s old it is stale."""
    run = tmp_path / "r"
    beat(run, "driver", 0, 1, interval_ms=10, age_s=0.1)
    beat(run, "lm_policy", 0, 2, interval_ms=10, age_s=0.2)
    states = {r["pid"]: r["state"] for r in run_status(run, NOW)["processes"]}
    assert states == {1: "running", 2: "stale"}


FORGED = "policy\x1b[2J\nFORGED ROW"


def test_the_table_escapes_control_characters_a_store_holds(tmp_path: Path) -> None:
    """A group, a host and a phase name holding a terminal escape, a newline and a bell (a worker named so
    through the public API, or a heartbeat written by hand): ``lens-rl status`` shows them escaped, so the
    screen is not cleared and no row is forged; ``--json`` keeps them exact."""
    run = tmp_path / "r"
    path = beat(run, FORGED, 0, 7, open_phases=[phase("gen\x1b]0;owned\x07", 1.0)])
    content = json.loads(path.read_text())
    content["resource"]["host.name"] = "node\x07\u202e1"
    content["written_ns"] = time.time_ns()
    content["open"][0]["start_ns"] = time.time_ns() - 10**9
    content["interval_ms"] = 600_000
    path.write_text(json.dumps(content))
    out = lens("status", str(run))
    assert out.returncode == 0, out.stderr
    assert not any(c in out.stdout for c in "\x1b\x07\u202e"), out.stdout
    assert not any(line.lstrip().startswith("FORGED") for line in out.stdout.splitlines()), out.stdout
    assert "policy\\x1b[2J\\nFORGED" in out.stdout and "gen\\x1b]0;owned\\x07" in out.stdout
    assert "node\\x07\\u202e1"[:13] in out.stdout
    exact = lens("status", str(run), "--json")
    (row,) = json.loads(exact.stdout)["processes"]
    assert row["worker_group"] == FORGED and row["host"] == "node\x07\u202e1"
