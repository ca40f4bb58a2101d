"""``lens-rl status`` on hand-written heartbeats: running, stale, ended, HUNG; the innermost open phase against
its usual p95 and longest; earlier attempts apart; workers reaped with their driver; 2,000 processes
summarised by group with the abnormal ones listed, in well under a second; the exit status."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from lens_rl.offline.show.status import format_status, run_status

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


def test_two_thousand_processes_are_summarised_by_group_in_well_under_a_second(tmp_path: Path) -> None:
    """2,000 heartbeats (one stale, one hung): read and summarised in under a second (it takes a fraction);
    the table stays short: the groups, then only the two abnormal processes."""
    run = tmp_path / "r"
    beat(run, "driver", 0, 1)
    for rank in range(1999):
        group = "lm_policy" if rank < 1500 else "vllm_policy"
        opened = [phase("policy_training", 900, hung=True)] if rank == 1234 else [phase("policy_training", 5)]
        beat(run, group, rank, 100 + rank, age_s=30 if rank == 77 else 0.2, open_phases=opened)
    started = time.perf_counter()
    report = run_status(run, NOW)
    text = format_status(report)
    elapsed = time.perf_counter() - started
    assert elapsed < 1.0, elapsed
    assert len(report["processes"]) == 2000 and not report["ok"]
    lines = text.splitlines()
    assert len(lines) < 20, text
    assert "abnormal processes (2 of 2000" in text
    assert any(" 1234 " in line and "HUNG" in line for line in lines)
    assert any("    77 " in line and "stale" in line for line in lines)


def test_the_command_exits_1_on_trouble_and_says_when_there_is_no_heartbeat(tmp_path: Path) -> None:
    """Exit 0 when all is well, 1 when a process is stale or hung, 2 (one line) when there are no
    heartbeat files; --json is the report."""
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
    (tmp_path / "spans_only" / "r").mkdir(parents=True)
    none = run(str(tmp_path / "spans_only"))
    assert none.returncode == 2 and "no lens_rl heartbeat files (live-*.json)" in none.stderr
