"""A driver and two trainer workers for the ``steps: auto`` tests: ``python profile_job.py SLOW_STEP SLOW_S MARKED``.

Telemetry from the environment. The driver (its step umbrellas, a little waiting each step) hands each step to
two worker processes (``multiprocessing`` spawn; group ``trainer``, no umbrella: their phases carry the step);
each worker's ``policy_training`` sleeps ``LOOP_STEP_S`` (default 0.2) and ends in a collective (a barrier of the
two). At ``SLOW_STEP`` rank 1 computes ``SLOW_S`` seconds on the CPU first (torch's matrix products where torch
is importable: its profiler then has ops to see; rank 0 waits in the collective).
``MARKED`` 1: the wait is an ``idle`` phase ``barrier`` (the straggler rule's convention); 0: it is left inside
``policy_training``. The driver runs until a step-``SLOW_STEP`` capture (any ``*-step*`` file after it) exists and
3 steps more, at most 400 steps; prints ``done`` last.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
import time
from pathlib import Path
from typing import Any

import lens_rl
from lens_rl import traced_phase


def worker(rank: int, steps: Any, done: Any, barrier: Any, slow_step: int, slow_s: float, marked: bool) -> None:
    try:
        import torch
    except ImportError:
        torch = None
    lens_rl.init_telemetry_worker(rank=rank, world_size=2, worker_group="trainer")
    pause = float(os.environ.get("LOOP_STEP_S", "0.2"))
    x = torch.rand(64, 64) if torch is not None else None
    while (step := steps.get()) is not None:
        with traced_phase("policy_training", step=step):
            if rank == 1 and step == slow_step:
                began = time.monotonic()
                while time.monotonic() - began < slow_s:
                    if torch is not None:
                        x = torch.tanh(x @ x / 64 + 0.1)
                    else:
                        sum(i * i for i in range(2000))
            time.sleep(pause)
            with traced_phase("barrier", step=step) if marked else contextlib.nullcontext():
                barrier.wait(120)
        done.put(rank)
    lens_rl.shutdown_telemetry(5000)


def main() -> None:
    slow_step, slow_s, marked = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3] == "1"
    lens_rl.init_telemetry_driver({})
    run = Path(os.environ["LENS_RL_OTEL_TRACE_DIR"]) / os.environ["LENS_RL_OTEL_RUN_ID"]
    context = multiprocessing.get_context("spawn")
    done, barrier = context.Queue(), context.Barrier(2)
    queues = [context.Queue(), context.Queue()]
    procs = [
        context.Process(target=worker, args=(rank, queues[rank], done, barrier, slow_step, slow_s, marked))
        for rank in (0, 1)
    ]
    for proc in procs:
        proc.start()
    after = None
    for step in range(400):
        with traced_phase("step", step=step):
            for queue in queues:
                queue.put(step)
            done.get(timeout=120)
            done.get(timeout=120)
        if (
            after is None
            and step > slow_step
            and any(
                int(path.name.split("-step")[1].split(".")[0]) > slow_step
                for path in (run / "profiles").glob("*-step*")
            )
        ):
            after = step
        if after is not None and step >= after + 3:
            break
    for queue in queues:
        queue.put(None)
    for proc in procs:
        proc.join(120)
    lens_rl.shutdown_telemetry(5000)
    print("done", flush=True)


if __name__ == "__main__":
    main()
