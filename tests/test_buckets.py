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


def test_the_docs_list_every_default_phase_name() -> None:
    """docs/phase-names.md lists every name of the default table with its bucket."""
    text = (ROOT / "docs" / "phase-names.md").read_text()
    missing = [name for name, bucket in DEFAULT_PHASE_BUCKETS.items() if f"`{name}` | {bucket.value}" not in text]
    assert missing == []
