"""The pipeline's pools from ``rl.pool``: the allowed values read case and blanks aside, any other said once in the
look's warnings (naming the group and the value), the group then read by its productive time."""

from __future__ import annotations

from pathlib import Path

from lens_rl.offline.rollup.pools import pool_said
from lens_rl.offline.run.analyze import analyze
from lens_rl.store import span_files
from tests.stores import span, write_process


def test_an_allowed_pool_reads_whatever_its_case_and_blanks() -> None:
    """``Trainer``, `` ROLLOUT `` and ``other`` name their pools; ``trainers``, ``actor``, 3 and "" name none."""
    assert [pool_said(v) for v in ("Trainer", " ROLLOUT ", "other")] == ["trainer", "rollout", "other"]
    assert [pool_said(v) for v in ("trainers", "actor", 3, "", None)] == [None] * 5


def test_a_pool_that_names_none_is_warned_once_and_the_group_read_by_its_phases(tmp_path: Path) -> None:
    """A group whose phases say reward (other) pinned as "Trainer" is a trainer pool, silently; a generating group
    of two processes saying "actor" is one warning naming the group, the value and the allowed pools, and reads
    as rollout by its productive time."""
    write_process(tmp_path, "driver", 0, 1, [span("step", 0, 10, "s0", step=0)], root="job", role="driver")
    write_process(tmp_path, "learner", 0, 2, [span("reward", 0, 5, "r", bucket="productive")], **{"rl.pool": "Trainer"})
    for rank in (0, 1):
        gen = [span("generation", 0, 8, f"g{rank}", bucket="productive")]
        write_process(tmp_path, "actors", rank, 3 + rank, gen, **{"rl.pool": "actor"})
    report = analyze(span_files(tmp_path), jobs=1, warmup_steps=0)
    pools = {p["pool"]: p["worker_groups"] for p in report["pipeline"]["pools"]}
    assert pools == {"rollout": ["actors"], "trainer": ["learner"], "other": ["driver"]}
    (warned,) = [w for w in report["warnings"] if w["kind"] == "pool_unknown"]
    assert (warned["worker_group"], warned["value"], warned["role"]) == ("actors", "actor", "rollout")
    assert "'actors'" in warned["message"] and "'actor'" in warned["message"]
    assert "rollout, trainer, other" in warned["message"]


def test_a_trainer_whose_time_is_backward_and_optimizer_steps_is_a_trainer_pool(tmp_path: Path) -> None:
    """A group working as transformers' and TRL's woven trainer does (compute_loss, backward, optimizer_step,
    a little generation) is a trainer pool, not other (those are parts of the training step); a generating
    group beside it stays rollout."""
    write_process(tmp_path, "driver", 0, 1, [span("step", 0, 10, "s0", step=0)], root="job", role="driver")
    parts = [("generate", 0, 2), ("compute_loss", 2, 4), ("backward", 4, 7), ("optimizer_step", 7, 9)]
    trainer = [span(name, lo, hi, f"t{i}", bucket="productive", step=0) for i, (name, lo, hi) in enumerate(parts)]
    write_process(tmp_path, "trainer", 0, 2, trainer)
    write_process(tmp_path, "actors", 0, 3, [span("generation", 0, 8, "g", bucket="productive", step=0)])
    report = analyze(span_files(tmp_path), jobs=1, warmup_steps=0)
    pools = {p["pool"]: p["worker_groups"] for p in report["pipeline"]["pools"]}
    assert pools["trainer"] == ["trainer"] and pools["rollout"] == ["actors"]
