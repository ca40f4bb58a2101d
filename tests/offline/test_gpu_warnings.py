"""The GPU warnings from the rollup's rows: which phases and stretches are named, and which are not."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np

from lens_rl.offline.rollup.gpu_warnings import GAP_S, IDLE_SHARE, idle_gaps, idle_in_productive, unavailable

S = 1_000_000_000


def _row(phase: str, bucket: str, share: float | None) -> dict[str, Any]:
    return {"phase": phase, "bucket": bucket, "worker_group": "actor", "gpu_idle_share": share, "gpu_idle_s": 4.0}


def test_a_productive_phase_idle_past_the_share_is_named_and_no_other() -> None:
    """Only a productive phase whose GPUs read idle more than IDLE_SHARE of its time is named, with its share;
    an overhead phase, one at the share exactly and one with no reading (null) are not."""
    rows = [
        _row("generation", "productive", 0.41),
        _row("training", "productive", IDLE_SHARE),
        _row("weight_sync", "overhead", 0.9),
        _row("reward", "productive", None),
    ]
    (named,) = idle_in_productive(rows)
    assert named["kind"] == "gpu_idle_in_productive" and named["phase"] == "generation" and named["share"] == 0.41
    assert "41%" in named["message"] and "4.0 s" in named["message"]


def _group(*spans: tuple[str, float, float]) -> list[tuple[Any, Any]]:
    keys = sorted({(name, "productive") for name, _lo, _hi in spans})
    index = np.array([keys.index((name, "productive")) for name, _lo, _hi in spans])
    starts = np.array([int(lo * S) for _n, lo, _hi in spans], dtype=np.int64)
    ends = np.array([int(hi * S) for _n, _lo, hi in spans], dtype=np.int64)
    return [("rank0", (["GPU-0"], starts, ends, keys, index))]


def test_a_stretch_where_every_device_idles_is_named_by_the_phases_on_either_side() -> None:
    """Idle from 10 s to 13 s between generation (0-10 s) and training (13-20 s): one gap of 3 s, named
    (generation, training); a stretch shorter than GAP_S (20.5-22 s, before the next generation) is not."""
    groups = {"actor": _group(("generation", 0, 10), ("training", 13, 20), ("generation", 22, 30))}
    idle = {"GPU-0": np.array([[10 * S, 13 * S], [int(20.5 * S), 22 * S]], dtype=np.int64)}
    assert (22 - 20.5) < GAP_S < 3
    (gap,) = idle_gaps(groups, idle)
    assert gap["kind"] == "gpu_idle_gap" and gap["worker_group"] == "actor"
    assert gap["between"] == ["generation", "training"] and gap["gaps"] == 1
    assert gap["gap_s"] == 3.0 and gap["longest_s"] == 3.0 and gap["first_at_s"] == 10.0


def test_a_stretch_is_named_only_where_every_device_of_the_group_idles() -> None:
    """Two devices: the first idles 10-13 s, the second only 10-11 s: no stretch of GAP_S where both idle."""
    (member,) = _group(("generation", 0, 10), ("training", 13, 20))
    key, (_uuids, *cols) = member
    groups = {"actor": [(key, (["GPU-0", "GPU-1"], *cols))]}
    idle = {
        "GPU-0": np.array([[10 * S, 13 * S]], dtype=np.int64),
        "GPU-1": np.array([[10 * S, 11 * S]], dtype=np.int64),
    }
    assert idle_gaps(groups, idle) == []


def test_no_stretch_is_named_where_a_device_of_the_group_has_no_reading() -> None:
    """The first device idles 10-13 s, the second has no reading at all (its host's sample file lost): nobody
    knows that every GPU of the group idled, so no stretch is named (it was named from the first alone)."""
    (member,) = _group(("generation", 0, 10), ("training", 13, 20))
    key, (_uuids, *cols) = member
    groups = {"actor": [(key, (["GPU-0", "GPU-1"], *cols))]}
    assert idle_gaps(groups, {"GPU-0": np.array([[10 * S, 13 * S]], dtype=np.int64)}) == []
    idle = {"GPU-0": np.array([[10 * S, 13 * S]], dtype=np.int64), "GPU-1": np.array([[9 * S, 14 * S]])}
    assert [gap["between"] for gap in idle_gaps(groups, idle)] == [["generation", "training"]]


def test_the_stretches_named_are_those_of_every_devices_idle_stretches_intersected() -> None:
    """Many devices with many idle stretches, short and long, overlapping or not: the gaps named are those of
    the whole intersection of every device's stretches (the short ones too) that last GAP_S or more."""
    from lens_rl.offline.read.intervals import intersected

    rng = np.random.default_rng(4)
    spans = [("generation", 0, 50), ("training", 52, 100), ("generation", 103, 200)]
    (member,) = _group(*spans)
    key, (_uuids, *cols) = member
    for _case in range(40):
        uuids = [f"GPU-{i}" for i in range(int(rng.integers(1, 5)))]
        idle = {}
        for uuid in uuids:
            edges = np.sort(rng.choice(200 * 4, size=2 * int(rng.integers(0, 40)), replace=False)) * (S // 4)
            idle[uuid] = edges.reshape(-1, 2).astype(np.int64)
        groups = {"actor": [(key, (uuids, *cols))]}
        whole = [(0, 200 * S)]
        for uuid in uuids:
            whole = intersected(whole, idle[uuid].tolist())
        long = [(lo, hi) for lo, hi in whole if hi - lo >= GAP_S * S]
        named = idle_gaps(groups, idle)
        assert sum(w["gaps"] for w in named) == len(long)
        assert round(sum(w["gap_s"] for w in named), 6) == round(sum(hi - lo for lo, hi in long) / S, 6)


def test_a_device_with_no_utilisation_is_named_unavailable_never_read_as_idle() -> None:
    """A device flagged unavailable, one without a utilisation counter and one that gave no reading are named
    (with how many processes use it); a device that read utilisation is not."""
    devices = {
        "GPU-a": SimpleNamespace(uuid="GPU-a", unavailable=True, has={"util"}, name="H100", host="n0"),
        "GPU-b": SimpleNamespace(uuid="GPU-b", unavailable=False, has={"mem"}, name="H100", host="n0"),
        "GPU-c": SimpleNamespace(uuid="GPU-c", unavailable=False, has={"util"}, name=None, host=None),
        "GPU-d": SimpleNamespace(uuid="GPU-d", unavailable=False, has={"util"}, name="H100", host="n1"),
    }
    named = {w["uuid"]: w for w in unavailable(devices, {"GPU-a": ["p1", "p2"]}, {"GPU-d"})}
    assert sorted(named) == ["GPU-a", "GPU-b", "GPU-c"]
    assert named["GPU-a"]["processes"] == 2 and "every counter" in named["GPU-a"]["message"]
    assert "no utilisation counter" in named["GPU-b"]["message"]
    assert "(? on ?)" in named["GPU-c"]["message"] and "never 0 %" in named["GPU-c"]["message"]


def test_a_gap_is_named_by_the_phases_at_its_edges_not_the_step_umbrellas_around_them() -> None:
    """Step umbrellas (step 1: 0-10 s, step 2: 12.9-20 s) around generation (0-7 s), training (7-10 s) and the
    next generation (13-20 s): the gap 10-13 s is named (training, generation), not (step, step)."""
    groups = {
        "actor": _group(
            ("step", 0, 10), ("generation", 0, 7), ("training", 7, 10), ("step", 12.9, 20), ("generation", 13, 20)
        )
    }
    idle = {"GPU-0": np.array([[10 * S, 13 * S]], dtype=np.int64)}
    (gap,) = idle_gaps(groups, idle)
    assert gap["between"] == ["training", "generation"]


def test_a_gap_inside_one_phase_is_named_by_it_and_a_late_idle_reading_by_the_phase_before() -> None:
    """Generation 1-11 s idling 4-7 s (waiting on a reward server) is named (generation, generation), not the
    phases around it; a gap read from 10.25 s (the first idle sample after generation ended at 10 s) inside a
    step umbrella is named by that generation and the training after it, not by the umbrella."""
    groups = {"actor": _group(("step", 0, 30), ("generation", 1, 11), ("training", 14, 20))}
    idle = {"GPU-0": np.array([[4 * S, 7 * S], [int(11.25 * S), 14 * S]], dtype=np.int64)}
    gaps = sorted(idle_gaps(groups, idle), key=lambda gap: gap["first_at_s"])
    assert [gap["between"] for gap in gaps] == [["generation", "generation"], ["generation", "training"]]
    assert "read idle during generation:" in gaps[0]["message"]
