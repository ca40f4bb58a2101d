"""A small CPU training loop for the profiler-window tests: ``python profile_loop.py RANK STEPS [SLOW_STEP SLOW_S]``.

Telemetry from the environment (a worker of group ``trainer``); each step an umbrella ``train_step`` with a
``forward`` phase of matrix products (torch when importable, else pure Python). Prints one ``step N loss X``
line a step and ``done`` last. ``LOOP_PAUSE_S`` waits between steps (a request may arrive meanwhile);
``LOOP_START_FILE``: the loop waits for that file before its first step, ``LOOP_FAIL_PROFILER``: the job's
torch profiler raises when started.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import lens_rl

try:
    import torch
except ImportError:
    torch = None


def main() -> None:
    rank, steps = int(sys.argv[1]), int(sys.argv[2])
    slow_step, slow_s = (int(sys.argv[3]), float(sys.argv[4])) if len(sys.argv) > 4 else (-1, 0.0)
    pause = float(os.environ.get("LOOP_PAUSE_S", "0"))
    if torch is not None and os.environ.get("LOOP_FAIL_PROFILER"):

        def fail(self: object) -> None:
            raise RuntimeError("profiler broken on purpose")

        torch.profiler.profile.start = fail
    lens_rl.init_telemetry_worker(rank=rank, world_size=2, worker_group="trainer")
    start_file = os.environ.get("LOOP_START_FILE")
    while start_file and not Path(start_file).exists():
        time.sleep(0.05)
    x = torch.ones(64, 64) if torch is not None else None
    for step in range(steps):
        with lens_rl.traced_phase("step", step=step):
            with lens_rl.traced_phase("forward", bucket="productive"):
                loss = 0.0
                for _ in range(20):
                    if torch is not None:
                        x = torch.tanh(x @ x / 64)
                        loss = float(x.mean())
                    else:
                        loss += sum(i * i for i in range(2000)) * 1e-12
                if step == slow_step:
                    time.sleep(slow_s)
        print(f"step {step} loss {loss:.6f}", flush=True)
        if pause:
            time.sleep(pause)
    lens_rl.shutdown_telemetry()
    print("done", flush=True)


if __name__ == "__main__":
    main()
