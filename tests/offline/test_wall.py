"""Goodput of the wall: productive over wall-clock seconds, whatever the phase names; every group's phases;
broken drivers read right."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lens_rl.buckets import default_bucket
from lens_rl.offline.run.analyze import analyze
from lens_rl.offline.show.table import format_table
from lens_rl.store import span_files
from tests.stores import span, write_process


def _steps(names: list[tuple[str, float]], steps: int = 3, step_s: float = 10.0) -> list[dict]:
    """A driver loop: rl.job, then ``steps`` umbrellas each running ``names`` (name, seconds) back to back."""
    rows = [span("rl.job", 0, steps * step_s, "job")]
    for i in range(steps):
        t = i * step_s
        rows.append(span("step", t, t + step_s, f"s{i}", parent="job", step=i))
        for name, seconds in names:
            rows.append(span(name, t, t + seconds, f"{name}{i}", parent=f"s{i}", step=i))  # (the step it carries)
            t += seconds
    return rows


def _with_default_buckets(rows: list[dict]) -> list[dict]:
    """What a phase records: its default bucket as rl.bucket, when its name has one."""
    for row in rows:
        bucket = default_bucket(row["n"]) if row["n"] not in ("rl.job", "step") else None
        if bucket is not None:
            row.setdefault("a", {})["rl.bucket"] = bucket.value
    return rows


def test_goodput_divides_by_the_wall_so_an_unknown_name_never_inflates_it(tmp_path: Path) -> None:
    """A step of 10 s with 2 s of generation and 7 s under a name no table knows reads 20 %, not 100 %; the
    unknown leaf phase is named with its share and a did-you-mean."""
    write_process(
        tmp_path, "driver", 0, 1, _with_default_buckets(_steps([("generation", 2.0), ("exposed_gen", 7.0)])), root="job"
    )
    report = analyze(span_files(tmp_path))
    assert report["goodput"] == pytest.approx(0.2) and report["steady_state_goodput"] == pytest.approx(0.2)
    assert all(
        s["goodput"] == pytest.approx(0.2) and s["unattributed_s"] == pytest.approx(8.0) for s in report["steps"]
    )
    assert report["unbucketed_phases"] == [
        {
            "phase": "exposed_gen",
            "worker_group": "driver",
            "total_s": 21.0,
            "share": 0.7,
            "did_you_mean": "exposed_generation",
        }
    ]
    table = format_table(report)
    assert "unbucketed: 'exposed_gen' (driver) covers 70% of the steps' wall" in table
    assert "did you mean 'exposed_generation'?" in table


@pytest.mark.parametrize(("names", "expected"), [
    # NeMo-RL's async GRPO: the trainer waits on the generation buffer in exposed_generation (idle)
    ([("exposed_generation", 2.1), ("reward_calculation", 0.4), ("policy_and_reference_logprobs", 0.8),
      ("advantage_calculation", 0.1), ("training_prep", 0.2), ("policy_training", 1.6), ("weight_sync", 0.3)], 2.9),
    # veRL's ray_trainer names
    ([("gen", 3.0), ("reward", 0.5), ("old_log_prob", 1.0), ("ref", 1.0), ("adv", 0.2), ("update_actor", 2.0),
      ("testing", 1.0)], 7.7),
    # SkyRL's async trainer
    ([("wait_for_generation_buffer", 2.0), ("convert_to_training_input", 0.5), ("run_training", 4.0),
      ("sync_weights", 1.0)], 4.0),
])  # fmt: skip
def test_frameworks_timer_names_are_bucketed(tmp_path: Path, names: list[tuple[str, float]], expected: float) -> None:
    """NeMo-RL's, veRL's and SkyRL's own timer names have buckets: nothing is left unbucketed, goodput is the
    productive seconds over the 10 s step."""
    write_process(tmp_path, "driver", 0, 1, _with_default_buckets(_steps(names)), root="job")
    report = analyze(span_files(tmp_path))
    assert report["unbucketed_phases"] == []
    assert report["steady_state_goodput"] == pytest.approx(expected / 10.0)


def test_every_groups_phases_are_in_the_table(tmp_path: Path) -> None:
    """Phases of every process, per worker group, with what the share is of: the driver's the job's wall,
    a worker group's the lifetimes of its processes; tokens/s where the group recorded tokens."""
    write_process(
        tmp_path,
        "driver",
        0,
        1,
        _with_default_buckets(_steps([("exposed_generation", 4.0), ("policy_training", 6.0)])),
        root="job",
    )
    gens = [
        span(
            "generation",
            2 + 10 * i,
            8 + 10 * i,
            f"g{i}",
            parent="job",
            remote=True,
            bucket="productive",
            step=i,
            **{"rl.num_tokens": 3000},
        )
        for i in range(3)
    ]
    write_process(tmp_path, "vllm_policy", 0, 2, gens)
    report = analyze(span_files(tmp_path))
    rows = {(p["worker_group"], p["phase"]): p for p in report["phases"]}
    gen = rows[("vllm_policy", "generation")]
    assert (gen["count"], gen["total_s"], gen["tokens_per_s"], gen["share_of"]) == (3, 18.0, 500.0, "group lifetime")
    assert gen["share"] == pytest.approx(18.0 / 26.0)  # its lifetime: 2 s to 28 s
    assert rows[("driver", "exposed_generation")]["share"] == pytest.approx(12.0 / 30.0)
    assert rows[("driver", "exposed_generation")]["share_of"] == "job wall"
    assert [p["worker_group"] for p in report["phases"]][0] == "driver"
    assert "vllm_policy" in format_table(report)


def _killed_driver(tmp_path: Path) -> Path:
    """A driver SIGKILLed in its third step: no rl.job, step 2's umbrella never written (its phases were)."""
    rows = _with_default_buckets(_steps([("generation", 6.0), ("weight_sync", 2.0)]))
    rows = [r for r in rows if r["n"] != "rl.job" and r["s"] != span("x", 0, 0, "s2")["s"]]
    return write_process(
        tmp_path, "driver", 0, 1, [*rows, span("setup", -5, 0, "setup", parent="job", bucket="overhead")], root="job"
    )


def test_a_killed_driver_has_a_wall_and_its_last_step_is_incomplete(tmp_path: Path) -> None:
    """Without rl.job the job's wall runs from the driver's first span to its last; the step whose umbrella
    never ended is marked incomplete and kept out of the step figures."""
    _killed_driver(tmp_path)
    report = analyze(span_files(tmp_path))
    assert report["job"]["wall_s"] == pytest.approx(5 + 28.0)  # -5 s (setup) to the last phase's end, 28 s
    assert report["goodput"] == pytest.approx(18.0 / 33.0)
    assert [(s["step"], s["incomplete"]) for s in report["steps"]] == [(0, False), (1, False), (2, True)]
    assert report["steady_state_goodput"] == pytest.approx(0.6)  # step 1 alone
    assert report["step_time"]["max_s"] == 10.0 and [s["step"] for s in report["slowest_steps"]] == [0, 1]
    assert all(p["share"] is not None for p in report["phases"])
    assert any("no rl.job span" in n for n in report["notes"]) and any("incomplete step" in n for n in report["notes"])
    assert "(incomplete: its umbrella never ended)" in format_table(report)


def test_a_step_cut_short_by_a_shutdown_is_incomplete(tmp_path: Path) -> None:
    """An umbrella ended by shutdown_telemetry (a SIGTERM handler, another thread) did not run its course."""
    rows = _with_default_buckets(_steps([("generation", 6.0)], steps=2))
    rows[-2]["a"]["rl.ended_by_shutdown"] = True  # the last step's umbrella
    write_process(tmp_path, "driver", 0, 1, rows, root="job")
    report = analyze(span_files(tmp_path))
    assert [s["incomplete"] for s in report["steps"]] == [False, True]


def test_a_driver_file_with_no_spans_reads_as_no_driver_file(tmp_path: Path) -> None:
    """A header-only driver file (killed before its first export) gives the output of a store without it,
    plus one note naming it."""
    worker = [
        span("policy_training", 1 + 10 * i, 6 + 10 * i, f"t{i}", parent="s", remote=True, bucket="productive", step=i)
        for i in range(3)
    ]
    alone, both = tmp_path / "alone", tmp_path / "both"
    for run in (alone, both):
        write_process(run, "lm_policy", 0, 7, worker)
    write_process(both, "driver", 0, 1, [])
    without, with_empty = analyze(span_files(alone)), analyze(span_files(both))
    notes = with_empty.pop("notes")
    assert len(notes) == 1 and "spans-driver-0-1.jsonl: a driver file with no spans" in notes[0]
    without.pop("notes")
    assert with_empty == {**without, "files": 2}
    assert [s["step"] for s in with_empty["steps"]] == [0, 1, 2] and with_empty["job"]["view"] == "all processes"
    assert all(p["p95_s"] == pytest.approx(5.0) for p in with_empty["phases"])


def test_spans_of_several_runs_in_one_folder_get_a_note(tmp_path: Path) -> None:
    """Files of two runs copied into one folder are named in a note, not merged silently."""
    write_process(tmp_path, "driver", 0, 1, _steps([("generation", 5.0)]), root="job", run="a")
    write_process(tmp_path, "lm_policy", 0, 2, [span("train", 0, 1, "x", bucket="productive")], run="b")
    report = analyze(span_files(tmp_path))
    assert report["runs"] == ["a", "b"] and any("2 runs in one folder (a, b)" in n for n in report["notes"])


def test_p95_of_a_long_run_stays_within_half_a_percent_in_bounded_memory(tmp_path: Path) -> None:
    """Past 65,536 durations a phase keeps a log-scale sketch: its p95 is within 0.5 % of the exact one."""
    from lens_rl.offline.read.parts import EXACT_DURATIONS, PhasePart

    part = PhasePart()
    values = [1_000_000 * (1 + (i * 7919) % 1000) for i in range(EXACT_DURATIONS + 10)]  # 1 ms to 1 s, in ns
    part.durations.extend(values)
    part.bound()
    assert part.sketch is not None and not part.durations
    exact = sorted(values)[int(0.95 * len(values)) - 1] / 1e9
    assert part.quantile_s(0.95) == pytest.approx(exact, rel=0.005)
    half = PhasePart()
    half.durations.extend(values[:100])
    half.merge(part)  # exact values folded into the sketch
    assert sum((half.sketch or {}).values()) == len(values) + 100


def test_goodput_json_is_the_same_however_it_is_read(tmp_path: Path) -> None:
    """--jobs 1 and --jobs 2 give the same report on a store with broken and unknown parts."""
    _killed_driver(tmp_path)
    write_process(tmp_path, "vllm_policy", 0, 2, [span("gen", 1, 5, "g", parent="s0", remote=True, step=0)])
    one, two = analyze(span_files(tmp_path), jobs=1), analyze(span_files(tmp_path), jobs=2)
    assert json.dumps(one, sort_keys=True) == json.dumps(two, sort_keys=True)
