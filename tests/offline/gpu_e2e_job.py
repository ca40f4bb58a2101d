"""A process of the scripted GPU job (argv: role, t0 in epoch seconds): the driver holds one step open over the
whole script; a worker (rank from ``RANK``) runs ``generation`` from t0+1 to t0+6 and ``training`` from t0+9
to t0+12 s, its devices scripted by the stand-in NVML's scenario on the same clock."""

from __future__ import annotations

import os
import sys
import time

import lens_rl
from lens_rl import traced_phase


def until(t: float) -> None:
    while time.time() < t:
        time.sleep(min(0.01, max(t - time.time(), 0)))


role, t0 = sys.argv[1], float(sys.argv[2])
if role == "driver":
    lens_rl.init_telemetry_driver({}, "grpo")
    until(t0 + 0.5)
    with traced_phase("step", step=1):
        until(t0 + 12.5)
else:
    lens_rl.init_telemetry_worker(rank=int(os.environ["RANK"]), world_size=2, worker_group="actor")
    until(t0 + 1)
    with traced_phase("generation", step=1):
        until(t0 + 6)
    until(t0 + 9)
    with traced_phase("training", step=1):
        until(t0 + 12)
assert lens_rl.shutdown_telemetry(10000)
