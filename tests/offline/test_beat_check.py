"""A heartbeat's fields checked against their JSON types (:mod:`lens_rl.offline.run.beat_check`): the first
wrong field is named, so ``status`` can say which and read the process as ``unreadable``."""

from __future__ import annotations

import time
from typing import Any

import pytest

from lens_rl.offline.run.beat_check import INTERVAL_MAX_MS, int64, malformed


def _beat(**fields: Any) -> dict[str, Any]:
    beat: dict[str, Any] = {
        "resource": {"rl.worker_group": "actor", "nv.dl.rank": 0, "host.name": "n0", "rl.attempt": 0},
        "pid": 10,
        "state": "running",
        "written_ns": time.time_ns(),
        "interval_ms": 1000,
        "open": [{"name": "generation", "step": 3, "age_s": 1.5}],
        "last_step": {"step": 2},
        "phases": {"generation": {"p95_s": 2.0, "max_s": 3.0}},
    }
    beat.update(fields)
    return beat


def test_a_well_formed_heartbeat_is_read() -> None:
    assert malformed(_beat()) is None
    assert malformed(_beat(last_step=None, open=[], phases={})) is None


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"pid": "10"}, "pid"),
        ({"pid": True}, "pid"),  # (a bool is no JSON integer)
        ({"written_ns": 2**64}, "written_ns"),  # (past 64 bits)
        ({"written_ns": 1}, "written_ns"),  # (1970: no plausible time)
        ({"interval_ms": 0}, "interval_ms"),
        ({"interval_ms": INTERVAL_MAX_MS + 1}, "interval_ms"),
        ({"resource": {"nv.dl.rank": "0"}}, "resource.nv.dl.rank"),
        ({"open": [{"name": "g"}, {"name": "g", "age_s": "1"}]}, "open[1].age_s"),
        ({"open": ["generation"]}, "open[0]"),
        ({"phases": {"generation": {"p95_s": "2"}}}, "phases.generation.p95_s"),
        ({"last_step": {"step": 1.5}}, "last_step.step"),
    ],
)
def test_the_first_wrong_field_is_named(fields: dict[str, Any], named: str) -> None:
    assert malformed(_beat(**fields)) == named


def test_int64_takes_json_integers_that_fit_64_bits() -> None:
    assert int64(2**63 - 1) and int64(-(2**63))
    assert not int64(2**63) and not int64(True) and not int64(1.0)
