"""The pipeline's verdict: who waits for whom, by the SPEC's rules, with the figures that decided it.

Rules, in order: ``sync-bound`` when the weight-sync pause is at least 15 % of the wall; else the pool with the
larger idle by at least 10 points of the wall names the other one the bottleneck (the trainer idles:
``rollout-bound``; rollout idles: ``trainer-bound``); else ``balanced``. Without both a rollout and a trainer
pool there is no verdict between them (``None``, unless the sync pause decides).

Example::

    verdict(trainer_idle=0.6, rollout_idle=0.1, pause_share=0.02)["verdict"]   # "rollout-bound"
"""

from __future__ import annotations

from typing import Any

__all__ = ["IDLE_POINTS", "SYNC_SHARE", "verdict"]

#: The weight-sync pause's share of the wall from which a job is sync-bound.
SYNC_SHARE = 0.15
#: How much larger (share of the wall) one pool's idle must be to name the other the bottleneck.
IDLE_POINTS = 0.10

_MOVE = {
    "sync-bound": "make the weight sync cheaper or overlap it with generation (the pause is the rollout pool's wait)",
    "rollout-bound": "move GPUs from the trainer pool to rollout (or generate faster: the trainer waits for data)",
    "trainer-bound": "move GPUs from rollout to the trainer pool (or allow more staleness / a larger buffer: "
    "rollout waits for weights or buffer room)",
    "balanced": "nothing to move: neither pool waits on the other by 10 points of the wall",
}


def verdict(trainer_idle: float | None, rollout_idle: float | None, pause_share: float | None) -> dict[str, Any]:
    """``{"verdict", "figures", "move"}`` from the pools' idle shares and the sync pause's share of the wall."""
    trainer_idle, rollout_idle, pause_share = (
        None if v is None else float(v) for v in (trainer_idle, rollout_idle, pause_share)
    )
    figures = {
        "trainer_idle": _r(trainer_idle),
        "rollout_idle": _r(rollout_idle),
        "sync_pause_share": _r(pause_share),
    }
    if pause_share is not None and pause_share >= SYNC_SHARE - 1e-12:
        name: str | None = "sync-bound"
    elif trainer_idle is None or rollout_idle is None:
        name = None
    elif trainer_idle - rollout_idle >= IDLE_POINTS - 1e-12:
        name = "rollout-bound"
    elif rollout_idle - trainer_idle >= IDLE_POINTS - 1e-12:
        name = "trainer-bound"
    else:
        name = "balanced"
    return {
        "verdict": name,
        "figures": figures,
        "move": _MOVE[name] if name is not None else "no verdict: it needs a rollout and a trainer pool",
    }


def _r(value: float | None) -> float | None:
    return None if value is None else round(float(value), 6)
