"""A small CPU training loop for the profiler-window tests: ``python profile_loop.py RANK STEPS [SLOW_STEP SLOW_S]``.

Telemetry from the environment (a worker of group ``trainer``); each step an umbrella ``train_step`` with a
``forward`` phase of matrix products (torch when importable, else pure Python). Prints one ``step N loss X``
line a step and ``done`` last. ``LOOP_PAUSE_S`` waits between steps (a request may arrive meanwhile);
``LOOP_PHASES`` phases a step (default 1), ``LOOP_INNER`` products a phase (default 20) of ``LOOP_SIZE``-square
matrices (default 64); ``LOOP_BARRIER_DIR``: each step ends in a phase ``allreduce`` (idle) where the two ranks
wait for each other (files in that folder); ``LOOP_FAIL_PROFILER``: the job's torch profiler raises when started;
``LOOP_FLAT``: a worker's shape, no umbrella: each phase carries its step itself; ``LOOP_DRIVER``: the process
is the job's driver (its steps under the job root), not a worker.
"""

from __future__ import annotations

import contextlib
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
    if os.environ.get("LOOP_DRIVER"):
        lens_rl.init_telemetry_driver({})
    else:
        lens_rl.init_telemetry_worker(rank=rank, world_size=2, worker_group="trainer")
    phases = int(os.environ.get("LOOP_PHASES", "1"))
    inner = int(os.environ.get("LOOP_INNER", "20"))
    size = int(os.environ.get("LOOP_SIZE", "64"))
    barrier = Path(os.environ["LOOP_BARRIER_DIR"]) if os.environ.get("LOOP_BARRIER_DIR") else None
    torch.manual_seed(0) if torch is not None else None
    x = torch.rand(size, size) if torch is not None else None
    flat = bool(os.environ.get("LOOP_FLAT"))
    for step in range(steps):
        own = {"step": step} if flat else {}
        with lens_rl.traced_phase("step", step=step) if not flat else contextlib.nullcontext():
            loss = 0.0
            for phase in range(phases):
                name = "forward" if phase % 2 == 0 else "backward"
                with lens_rl.traced_phase(name, bucket="productive", **own):
                    for _ in range(inner):
                        if torch is not None:
                            x = torch.tanh(x @ x / size + 0.1)
                            loss = float(x.mean())
                        else:
                            loss += sum(i * i for i in range(2000)) * 1e-12
            if step == slow_step:
                with lens_rl.traced_phase("forward", bucket="productive", **own):
                    time.sleep(slow_s)
            if barrier:  # a collective: each rank waits for the other's arrival
                with lens_rl.traced_phase("allreduce", bucket="idle", **own):
                    (barrier / f"step{step}-rank{rank}").touch()
                    while not (barrier / f"step{step}-rank{1 - rank}").exists():
                        time.sleep(0.002)
        print(f"step {step} loss {loss:.6f}", flush=True)
        if pause:
            time.sleep(pause)
    lens_rl.shutdown_telemetry()
    print("done", flush=True)


if __name__ == "__main__":
    main()
