"""The pipeline's verdict: who waits for whom, by the SPEC's rules, with the figures that decided it.

The rule itself lives in :mod:`lens_rl.buckets.verdict_rule` (one function: the live ``step_metrics()`` keys use
it too); this module is its name on the rollup's floor. Rules, in order: ``sync-bound`` when the weight-sync pause
is at least 15 % of the wall; else the pool with the larger idle by at least 10 points of the wall names the other
one the bottleneck (the trainer idles: ``rollout-bound``; rollout idles: ``trainer-bound``); else ``balanced``.
Without both a rollout and a trainer pool there is no verdict between them (``None``, unless the sync pause
decides).

Example::

    verdict(trainer_idle=0.6, rollout_idle=0.1, pause_share=0.02)["verdict"]   # "rollout-bound"
"""

from __future__ import annotations

from lens_rl.buckets.verdict_rule import IDLE_POINTS, SYNC_SHARE, VERDICTS, verdict, verdict_name

__all__ = ["IDLE_POINTS", "SYNC_SHARE", "VERDICTS", "verdict", "verdict_name"]
