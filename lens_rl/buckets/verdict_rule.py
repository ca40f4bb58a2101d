"""The one verdict rule, live (``step_metrics()``) and offline (the pipeline rollup: per job, per window of steps
and per step): who waits for whom, by the SPEC's rules, with the figures that decided it. Of the vocabulary floor
(imports nothing of lens_rl); :mod:`lens_rl.buckets` re-exports it.

Rules, in order: ``sync-bound`` when the weight-sync pause is at least 15 % of the wall; else the pool with the
larger idle by at least 10 points of the wall names the other one the bottleneck (the trainer idles:
``rollout-bound``; rollout idles: ``trainer-bound``); else ``balanced``. Without both a rollout and a trainer
pool there is no verdict between them (``None``, unless the sync pause decides).

Example::

    verdict_name(trainer_idle=0.6, rollout_idle=0.1, pause_share=0.02)   # "rollout-bound"
    verdict(0.6, 0.1, 0.02)["move"]   # "move GPUs from the trainer pool to rollout (...)"
"""

from __future__ import annotations

from typing import Any

__all__ = ["IDLE_POINTS", "SYNC_SHARE", "VERDICTS", "verdict", "verdict_name"]

#: The weight-sync pause's share of the wall from which a job is sync-bound.
SYNC_SHARE = 0.15
#: How much larger (share of the wall) one pool's idle must be to name the other the bottleneck.
IDLE_POINTS = 0.10
#: Every verdict the rule names (``step_metrics()`` gives each a 0/1 key).
VERDICTS = ("rollout-bound", "trainer-bound", "sync-bound", "balanced")

_MOVE = {
    "sync-bound": "make the weight sync cheaper or overlap it with generation (the pause is the rollout pool's wait)",
    "rollout-bound": "move GPUs from the trainer pool to rollout (or generate faster: the trainer waits for data)",
    "trainer-bound": "move GPUs from rollout to the trainer pool (or allow more staleness / a larger buffer: "
    "rollout waits for weights or buffer room)",
    "balanced": "nothing to move: neither pool waits on the other by 10 points of the wall",
}


def verdict_name(trainer_idle: float | None, rollout_idle: float | None, pause_share: float | None) -> str | None:
    """The rule's name (one of :data:`VERDICTS`, or None) from the pools' idle shares and the sync pause's share
    of the wall (None: that pool, or any sync, absent). Plain float comparisons: cheap enough per step."""
    if pause_share is not None and pause_share >= SYNC_SHARE - 1e-12:
        return "sync-bound"
    if trainer_idle is None or rollout_idle is None:
        return None
    if trainer_idle - rollout_idle >= IDLE_POINTS - 1e-12:
        return "rollout-bound"
    if rollout_idle - trainer_idle >= IDLE_POINTS - 1e-12:
        return "trainer-bound"
    return "balanced"


def verdict(trainer_idle: float | None, rollout_idle: float | None, pause_share: float | None) -> dict[str, Any]:
    """``{"verdict", "figures", "move"}`` from the pools' idle shares and the sync pause's share of the wall."""
    trainer_idle, rollout_idle, pause_share = (
        None if v is None else float(v) for v in (trainer_idle, rollout_idle, pause_share)
    )
    name = verdict_name(trainer_idle, rollout_idle, pause_share)
    return {
        "verdict": name,
        "figures": {
            "trainer_idle": _r(trainer_idle),
            "rollout_idle": _r(rollout_idle),
            "sync_pause_share": _r(pause_share),
        },
        "move": _MOVE[name] if name is not None else "no verdict: it needs a rollout and a trainer pool",
    }


def _r(value: float | None) -> float | None:
    return None if value is None else round(float(value), 6)
