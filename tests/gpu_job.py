"""A process of a GPU job for the sampler's tests: telemetry on from the environment, one ``generation`` phase
open until the file named by argv[1] exists (at most 120 s), then it prints what NVML calls it made
(``GPU_JOB_DEBUG`` set: lens_rl's debug lines on stderr)."""

from __future__ import annotations

import json
import os
import sys
import time

import lens_rl

if os.environ.get("GPU_JOB_DEBUG"):
    import logging

    logging.basicConfig(level=logging.DEBUG, stream=sys.stderr, format="%(name)s %(levelname)s %(message)s")
stop_file = sys.argv[1]
lens_rl.init_telemetry_worker(rank=int(os.environ.get("RANK", "0")), world_size=4, worker_group="actor")
print("ready", flush=True)
with lens_rl.traced_phase("generation"):
    deadline = time.monotonic() + 120
    while not os.path.exists(stop_file) and time.monotonic() < deadline:
        time.sleep(0.02)
pynvml = sys.modules.get("pynvml")
print(json.dumps({"calls": getattr(pynvml, "CALLS", None)}), flush=True)
lens_rl.shutdown_telemetry(5000)
