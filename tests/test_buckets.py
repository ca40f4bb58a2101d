"""The goodput vocabulary: buckets, the default phase table (lens_rl's and the frameworks' names), the exclusive-time rule."""

from __future__ import annotations

from pathlib import Path

from lens_rl.buckets import DEFAULT_PHASE_BUCKETS, PHASE_SOURCES, Bucket, closest_phase_name, default_bucket

ROOT = Path(__file__).resolve().parents[1]


def test_the_phase_table_knows_the_frameworks_and_their_hierarchies() -> None:
    """Names are read with their timer hierarchy: a bucket-named prefix (NeMo-RL's idle/...), a logged key's
    prefix (timing/train/...), a sub-timer of a known timer; umbrellas stay unbucketed."""
    assert default_bucket("exposed_generation") is Bucket.IDLE
    assert default_bucket("timing/train/exposed_generation") is Bucket.IDLE
    assert default_bucket("idle/validation") is Bucket.IDLE  # not validation's overhead: it is idle time
    assert default_bucket("prepare_for_generation/transfer_and_update_weights") is Bucket.OVERHEAD
    assert default_bucket("policy_training/submit_training_futures") is Bucket.PRODUCTIVE
    assert default_bucket("Update-Actor") is Bucket.PRODUCTIVE
    assert default_bucket("step") is None and default_bucket("total_step_time") is None
    assert set(PHASE_SOURCES) == {"lens_rl", "NeMo-RL", "veRL", "OpenRLHF", "SkyRL", "TRL"}
    assert closest_phase_name("reward_calc") == "reward_calculation" and closest_phase_name("zzz") is None
    assert closest_phase_name("policy_training") is None  # (a known name without a bucket: no "did you mean" it)


def test_the_docs_list_every_default_phase_name() -> None:
    """docs/phase-names.md lists every name of the default table with its bucket."""
    text = (ROOT / "docs" / "phase-names.md").read_text()
    missing = [name for name, bucket in DEFAULT_PHASE_BUCKETS.items() if f"`{name}` | {bucket.value}" not in text]
    assert missing == []


def test_claimed_counts_each_instant_once_productive_first() -> None:
    """Two productive stretches overlapping and an overhead one beside them: productive is their union, overhead
    only where nothing productive runs, and each owner's share splits the time it shared evenly."""
    from lens_rl.buckets import claimed

    totals, shares = claimed([(0, 10, 0, "train"), (2, 6, 0, "gen"), (8, 14, 1, "ckpt")])
    assert totals == [10, 4, 0, 0]
    assert shares == {"train": 8.0, "gen": 2.0, "ckpt": 4.0}


def test_subtracted_leaves_what_the_holes_do_not_cover() -> None:
    """A span 0-10 less its children 2-4, 3-5 and 9-12: 0-2, 5-9."""
    from lens_rl.buckets import subtracted

    assert subtracted(0, 10, [(3, 5), (2, 4), (9, 12)]) == [(0, 2), (5, 9)]


def test_the_weight_sync_family_holds_the_specs_and_frameworks_names() -> None:
    """weight_sync, update_weights, sync_weights, refit and NeMo-RL's prepare_for_generation/transfer_and_update_weights
    are weight syncs; generation is not."""
    from lens_rl.buckets import is_weight_sync

    names = [
        "weight_sync",
        "update_weights",
        "sync_weights",
        "refit",
        "prepare_for_generation/transfer_and_update_weights",
    ]
    assert all(map(is_weight_sync, names)) and not is_weight_sync("generation")
