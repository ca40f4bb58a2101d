"""The ``profile`` field and the pieces of the profiler windows that need no process: the config's parser (a
mapping or ``LENS_RL_OTEL_PROFILE``, with clear errors), the request file, and the automatic trigger's rule."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lens_rl.config import TelemetryConfig
from lens_rl.config.profile import ProfileSpec
from lens_rl.devices.profile_auto import AutoTrigger, culprit_of, spike
from lens_rl.devices.profile_requests import (
    REQUEST_FILE,
    answers,
    matches,
    read_request,
    read_requests,
    want_of,
    write_answer,
    write_request,
)


def test_the_env_form_and_the_mapping_form_read_alike_and_travel_to_workers() -> None:
    """``steps=3-4,groups=trainer|roll*,ranks=0|3,backend=cuda`` and the same mapping give one spec, which a
    worker's environment carries back unchanged; unset means on request only."""
    env = TelemetryConfig.from_env({"LENS_RL_OTEL_PROFILE": "steps=3-4,groups=trainer|roll*,ranks=0|3,backend=cuda"})
    block = {"steps": "3-4", "groups": ["trainer", "roll*"], "ranks": [0, 3], "backend": "cuda"}
    mapped = TelemetryConfig.from_master_config({"telemetry": {"profile": block}}, environ={})
    assert env.profile == mapped.profile == ProfileSpec((3, 4), ("trainer", "roll*"), (0, 3), "cuda")
    assert TelemetryConfig.from_env(env.to_env()).profile == env.profile
    assert TelemetryConfig.from_env({}).profile is None
    auto = TelemetryConfig.from_master_config(
        {"telemetry": {"profile": {"steps": "auto", "max_windows": 5}}}, environ={}
    )
    assert auto.profile == ProfileSpec("auto", max_windows=5)
    assert auto.profile.max_bytes == 512 << 20


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("steps=4-3", "telemetry.profile (from $LENS_RL_OTEL_PROFILE).steps: invalid value '4-3'"),
        ("stepz=3", "unknown key 'stepz'; did you mean 'steps'?"),
        ("backend=nsys", ".backend: invalid value 'nsys'; allowed: torch, cuda, vllm"),
        ("ranks=a", ".ranks: invalid value 'a'; allowed: ranks >= 0"),
        ("max_bytes=0", ".max_bytes: expected an integer > 0, got 0"),
        ("max_windows=-1", ".max_windows: expected an integer > 0"),
        ("steps", "invalid item 'steps'; allowed: key=value pairs"),
    ],
)
def test_a_bad_profile_value_names_the_field_the_value_and_what_is_allowed(value: str, says: str) -> None:
    """Each bad key or value raises ValueError naming it, the value and what is allowed."""
    with pytest.raises(ValueError, match=None) as caught:
        TelemetryConfig.from_env({"LENS_RL_OTEL_PROFILE": value})
    assert says in str(caught.value)


def test_a_request_names_its_processes_and_is_read_back(tmp_path: Path) -> None:
    """A request written for group glob ``train*`` rank 1 is read back whole and matches only that process;
    a torn or foreign file is no request; answers are gathered per request."""
    request_id = write_request(tmp_path, steps=(3, 5), group="train*", rank=1, backend="torch")
    request = read_request(tmp_path / REQUEST_FILE)
    assert request is not None and request["id"] == request_id and request["steps"] == [3, 5]
    assert matches(request, "trainer", 1) and not matches(request, "trainer", 0) and not matches(request, "rollout", 1)
    (tmp_path / REQUEST_FILE).write_text('{"id": "x", "steps": "sometime"}')
    assert read_request(tmp_path / REQUEST_FILE) is None
    (tmp_path / REQUEST_FILE).write_text("{torn")
    assert read_request(tmp_path / REQUEST_FILE) is None
    write_answer(tmp_path, request_id, "trainer", 1, ["profiles/trainer-1-step3.pt.trace.json.gz"], [])
    assert answers(tmp_path, request_id) == [
        {
            "id": request_id,
            "group": "trainer",
            "rank": 1,
            "pid": os.getpid(),
            "files": ["profiles/trainer-1-step3.pt.trace.json.gz"],
            "errors": [],
            "refused": [],
        }
    ]


def test_requests_written_at_once_are_all_kept_and_a_bare_request_still_reads(tmp_path: Path) -> None:
    """Sixteen writers at once (users and the automatic trigger): every request is in the file afterwards, none
    replaced by another; a file holding one bare request (the earlier format) reads as that request."""
    ids: list[str] = []
    writers = [
        threading.Thread(target=lambda rank=rank: ids.append(write_request(tmp_path, steps=(rank, rank), rank=rank)))
        for rank in range(16)
    ]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(60)
    assert sorted(request["id"] for request in read_requests(tmp_path / REQUEST_FILE)) == sorted(ids)
    (tmp_path / REQUEST_FILE).write_text(json.dumps({"id": "old1", "steps": [3, 4], "written_ns": 1}))
    assert [request["id"] for request in read_requests(tmp_path / REQUEST_FILE)] == ["old1"]
    write_request(tmp_path)  # (the bare request, long stale, is dropped by the next writer)
    assert len(read_requests(tmp_path / REQUEST_FILE)) == 1


def test_the_triggers_request_for_a_step_begun_already_takes_the_first_step_not_begun() -> None:
    """The automatic trigger asks for step 5 (``or_later``): read at step 5's boundary it is step 5; read at
    step 7's it is step 7, the reason saying step 5 had begun; a user's range that is over is refused."""
    request = {"id": "a1", "steps": [5, 5], "or_later": True, "reason": "auto: step 4 took 3.0x the median"}
    on_time, _ = want_of(request, 5)
    assert on_time is not None and (on_time.lo, on_time.hi, on_time.reason) == (5, 5, request["reason"])
    late, _ = want_of(request, 7)
    assert late is not None and (late.lo, late.hi) == (7, 7)
    assert late.reason == "auto: step 4 took 3.0x the median (step 5 had begun here: step 7, the first not)"
    over, why = want_of({"id": "u1", "steps": [5, 5]}, 7)
    assert over is None and "already at step 7" in why


def test_a_hostile_request_file_is_ignored_with_one_warning_and_never_blocks(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A FIFO, a link to /dev/zero, an oversized file or a deeply nested document named like the request file is
    no request: read_request returns None at once (never blocks, never raises), with one warning per kind."""
    path = tmp_path / REQUEST_FILE
    got: list[object] = []

    def read() -> None:
        got.append(read_request(path))

    def kinds() -> Iterator[None]:
        os.mkfifo(path)
        yield
        path.unlink()
        path.symlink_to("/dev/zero")
        yield
        path.unlink()
        path.write_text('{"id": "x", "steps": "next", "pad": "' + "x" * (80 << 10) + '"}')
        yield
        path.write_text("[" * 30_000 + "]" * 30_000)
        yield

    from lens_rl import _errors

    _errors.WARNED.difference_update({"profile-request-unreadable", "profile-request-unparsable"})
    with caplog.at_level(logging.WARNING, logger="lens_rl"):
        for _ in kinds():
            for _ in range(2):
                reader = threading.Thread(target=read, daemon=True)
                reader.start()
                reader.join(10)
                assert not reader.is_alive(), f"read_request blocked on {path}"
    assert got == [None] * 8
    warned = [r.getMessage() for r in caplog.records if "profile request" in r.getMessage()]
    assert len(warned) == 2 and "ignored" in warned[0], warned


def test_a_spike_is_five_mads_over_the_median_and_not_jitter() -> None:
    """5 MADs over the median of the history is a spike (the ratio); a steady loop's jitter or a short history
    is not."""
    history = [1.0, 1.1, 0.9, 1.0, 1.05, 0.95]
    assert spike(history, 2.3) == pytest.approx(2.3)
    assert spike(history, 1.2) is None
    assert spike([0.001] * 10, 0.004) is None  # 3 ms over a 1 ms median: under the 50 ms floor
    assert spike(history[:3], 9.0) is None


def test_the_culprit_is_the_rank_with_the_longest_compute_and_a_profiled_step_is_none(tmp_path: Path) -> None:
    """At a flagged step every rank's wall is alike; the culprit named is the rank that computed longest (the
    other waited in the collective); a step someone profiled names nobody."""
    ranks = {rank: AutoTrigger(tmp_path, "trainer", rank, decides=False) for rank in (0, 1)}
    for step in range(3):
        ranks[0].step_done(step, 1.0, 0.2 if step == 1 else 0.9)
        ranks[1].step_done(step, 1.0, 0.95 if step == 1 else 0.9, profiled=step == 2)
    assert culprit_of(tmp_path, 1, wait_s=0) == ("trainer", 1)
    assert culprit_of(tmp_path, 2, wait_s=0) is None
    lines = (ranks[1].path).read_text().splitlines()
    assert json.loads(lines[2]) == {"step": 2, "wall_s": 1.0, "compute_s": 0.9, "profiled": True, "group": "trainer"}


def test_a_fifo_named_like_a_ranks_step_lines_never_blocks_the_culprits_choice(tmp_path: Path) -> None:
    """A FIFO among the ranks' step-line files is skipped: the culprit is still named, at once."""
    trigger = AutoTrigger(tmp_path, "trainer", 0, decides=False)
    trigger.step_done(1, 1.0, 0.9)
    os.mkfifo(tmp_path / "profiles" / ".steps-trainer-7-123.jsonl")
    got: list[tuple[str, int] | None] = []
    reader = threading.Thread(target=lambda: got.append(culprit_of(tmp_path, 1, wait_s=0)), daemon=True)
    reader.start()
    reader.join(10)
    assert got == [("trainer", 0)]


def test_the_culprit_is_chosen_across_worker_groups_and_a_dead_ranks_line_is_not_waited_for_long(
    tmp_path: Path,
) -> None:
    """The driver's steps (little compute of its own) and two trainer workers' lines: the culprit is the trainer
    rank that computed longest, named by its group; a rank whose line never comes (it died) delays the choice
    by the wait only, and the ranks that wrote are still chosen from; a phase's time blocked (no CPU) is no
    compute."""
    driver = AutoTrigger(tmp_path, "driver", 0, decides=False)
    trainers = [AutoTrigger(tmp_path, "trainer", rank, decides=False) for rank in (0, 1)]
    for step in range(3):
        driver.step_done(step, 1.0, 0.01)
        trainers[0].worker_step(step, 0.2)
        if step < 2:
            trainers[1].worker_step(step, 0.9 if step == 1 else 0.1)
    assert json.loads(trainers[0].path.read_text().splitlines()[0]) == {"step": 0, "compute_s": 0.2, "group": "trainer"}
    assert culprit_of(tmp_path, 1, wait_s=0) == ("trainer", 1)
    assert culprit_of(tmp_path, 0, wait_s=0) == ("trainer", 0)
    began = time.monotonic()
    assert culprit_of(tmp_path, 2, wait_s=0.5) == ("trainer", 0)  # (rank 1 never wrote step 2)
    assert 0.4 <= time.monotonic() - began < 30
    trainers[0].worker_step(3, 0.9, cpu_s=0.05)  # (0.9 s in its phase, mostly blocked in a collective left inside)
    trainers[1].worker_step(3, 0.85, cpu_s=0.8)
    assert culprit_of(tmp_path, 3, wait_s=0) == ("trainer", 1)
