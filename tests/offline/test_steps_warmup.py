"""``--steps A-B`` and the warm-up: the steady state skips the job's first ``warmup_steps`` by step number (each
attempt's), so a selection past them keeps every step it selects, in the steady-state goodput, the pipeline and
its verdict windows; the refresh cache answers the same."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lens_rl.offline.run.analyze import analyze
from lens_rl.offline.run.cache import cache_folder
from lens_rl.store import span_files
from tests.offline.test_attempts import _store as _attempts_store
from tests.stores import span, write_process


def _job(run: Path, count: int = 8) -> list[Path]:
    """A driver with ``count`` 10 s steps, a rollout process generating 0-6 s and a trainer training 6-9 s of
    each step; step ``n``'s driver spends ``n`` tenths of a second more in overhead."""
    driver = []
    for n in range(count):
        base = 10.0 * n
        driver.append(span("step", base, base + 10, f"s{n}", step=n))
        driver.append(span("train", base + 1, base + 6, f"t{n}", bucket="productive", step=n, parent=f"s{n}"))
        driver.append(span("log", base + 6, base + 6 + n / 10, f"l{n}", bucket="overhead", step=n, parent=f"s{n}"))
    write_process(run, "driver", 0, 1, driver)
    rollout = [span("generation", 10.0 * n, 10.0 * n + 6, f"g{n}", bucket="productive") for n in range(count)]
    write_process(run, "rollout", 0, 2, rollout)
    trainer = [span("policy_training", 10.0 * n + 6, 10.0 * n + 9, f"p{n}", bucket="productive") for n in range(count)]
    write_process(run, "trainer", 0, 3, trainer)
    return span_files(run)


def _steady(report: dict[str, Any], steps: list[int]) -> float:
    """The productive over wall time of the report's rows of ``steps``."""
    rows = [r for r in report["steps"] if r["step"] in steps]
    return sum(r["seconds"]["productive"] for r in rows) / sum(r["wall_s"] for r in rows)


def test_a_selection_past_the_warmup_keeps_all_its_steps(tmp_path: Path) -> None:
    """``--steps 3-6`` with one warm-up step: steps 3 to 6 are all steady (goodput, pipeline steps, verdict
    window 3-6), as they are in the whole job's figures."""
    paths = _job(tmp_path)
    whole = analyze(paths, jobs=1, warmup_steps=1)
    picked = analyze(paths, jobs=1, warmup_steps=1, steps=(3, 6))
    assert [r["step"] for r in picked["steps"]] == [3, 4, 5, 6]
    assert picked["steady_state_goodput"] == pytest.approx(_steady(whole, [3, 4, 5, 6]))
    assert picked["pipeline"]["steps"] == 4
    assert [(w["first_step"], w["last_step"]) for w in picked["pipeline"]["verdict"]["windows"]] == [(3, 6)]
    assert whole["pipeline"]["steps"] == 7 and whole["steady_state_goodput"] == pytest.approx(
        _steady(whole, [*range(1, 8)])
    )


def test_a_selection_over_the_warmup_skips_only_the_jobs_first_steps(tmp_path: Path) -> None:
    """``--steps 1-4`` with two warm-up steps skips steps 0-1 (the job's first two), not 1-2; ``--steps 0-3``
    with one skips step 0; ``--warmup-steps 0`` skips nothing."""
    paths = _job(tmp_path)
    whole = analyze(paths, jobs=1, warmup_steps=0)
    two = analyze(paths, jobs=1, warmup_steps=2, steps=(1, 4))
    assert two["steady_state_goodput"] == pytest.approx(_steady(whole, [2, 3, 4])) and two["pipeline"]["steps"] == 3
    one = analyze(paths, jobs=1, warmup_steps=1, steps=(0, 3))
    assert one["steady_state_goodput"] == pytest.approx(_steady(whole, [1, 2, 3])) and one["pipeline"]["steps"] == 3
    none = analyze(paths, jobs=1, warmup_steps=0, steps=(1, 4))
    assert none["steady_state_goodput"] == pytest.approx(_steady(whole, [1, 2, 3, 4]))


def test_each_attempts_warmup_is_its_first_steps_whatever_is_selected(tmp_path: Path) -> None:
    """Attempt 1 resumed at step 2 (its warm-up): ``--steps 3-5`` keeps 3, 4 and 5; ``--steps 1-5`` skips
    step 2 only (step 0, attempt 0's warm-up, is not selected)."""
    paths = span_files(_attempts_store(tmp_path / "r"))
    whole = analyze(paths, jobs=1, warmup_steps=0)
    later = analyze(paths, jobs=1, warmup_steps=1, steps=(3, 5))
    assert later["steady_state_goodput"] == pytest.approx(_steady(whole, [3, 4, 5]))
    assert later["pipeline"]["steps"] == 3
    wider = analyze(paths, jobs=1, warmup_steps=1, steps=(1, 5))
    assert wider["steady_state_goodput"] == pytest.approx(_steady(whole, [1, 3, 4, 5]))
    assert wider["pipeline"]["steps"] == 4


@pytest.mark.parametrize("steps", [(3, 6), (0, 3), None])
def test_the_refresh_cache_answers_a_selection_as_a_cold_read(tmp_path: Path, steps: Any) -> None:
    """Twice through the refresh cache, a selection's report is the cold read's, byte for byte."""
    paths = _job(tmp_path / "run")
    cold = json.dumps(analyze(paths, jobs=1, warmup_steps=1, steps=steps), sort_keys=True)
    for _ in range(2):
        warm = analyze(paths, jobs=1, warmup_steps=1, steps=steps, cache=cache_folder(tmp_path / "run"))
        assert json.dumps(warm, sort_keys=True) == cold
