"""A real async RL loop on the CPU, run as __main__ by test_pipeline_loop.py: a driver, a generator process filling a
bounded queue (setting its weight version at each sync) and a trainer process consuming it, each its own worker group.

argv: trace_dir, clock.json, generation seconds, training seconds, steps. The generator generates a batch
(``generation``), puts it on the queue (blocking while it is full: rollout waits for buffer room) and, when the
trainer has published newer weights, loads them (``update_weights``) and calls ``set_weight_version``. The
trainer takes a batch (blocking while the queue is empty: it waits for data), trains on it (``policy_training``
with the batch's version and tokens) and publishes version step + 1. The driver's step ends when the trainer
says the step is done. Every process also writes down, on its own clock, when it generated, trained and
synced: ``clock.json``, what the test compares the rollup with.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import sys
import time
from typing import Any

import lens_rl
from lens_rl import traced_phase

TOKENS = 64


def generator(gen_s: float, version: Any, batches: Any, stop: Any, out: Any) -> None:
    lens_rl.init_telemetry_worker(rank=0, world_size=1, worker_group="rollout")
    mine = 0
    lens_rl.set_weight_version(mine)
    gens, syncs = [], []
    while not stop.is_set():
        a = time.time_ns()
        with traced_phase("generation"):
            time.sleep(gen_s)
        gens.append((a, time.time_ns()))
        while not stop.is_set():
            try:
                batches.put((mine, TOKENS), timeout=0.05)
                break
            except Exception:  # full: rollout waits for buffer room
                continue
        latest = version.value
        if latest != mine:
            a = time.time_ns()
            with traced_phase("update_weights"):
                time.sleep(0.002)
            mine = latest
            lens_rl.set_weight_version(mine)
            syncs.append((a, time.time_ns()))
    lens_rl.shutdown_telemetry(5000)
    out.put(("rollout", gens, syncs))


def trainer(train_s: float, steps: int, version: Any, batches: Any, done: Any, out: Any) -> None:
    lens_rl.init_telemetry_worker(rank=0, world_size=1, worker_group="trainer")
    trains = []
    for step in range(steps):
        got, tokens = batches.get()  # waits for data
        a = time.time_ns()
        with traced_phase("policy_training", step=step, trajectory_versions=[got], trajectory_tokens=[tokens]):
            time.sleep(train_s)
        trains.append((a, time.time_ns(), step, got))
        version.value = step + 1
        done.put(step)
    lens_rl.shutdown_telemetry(5000)
    out.put(("trainer", trains, []))


def main() -> None:
    trace_dir, clock, gen_s, train_s, steps = (
        sys.argv[1],
        sys.argv[2],
        float(sys.argv[3]),
        float(sys.argv[4]),
        int(sys.argv[5]),
    )
    lens_rl.init_telemetry_driver({"telemetry": {"enabled": True, "trace_dir": trace_dir, "run_id": "loop"}}, "grpo")
    ctx = mp.get_context("spawn")
    version, batches, done, stop, out = ctx.Value("q", 0), ctx.Queue(maxsize=2), ctx.Queue(), ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=generator, args=(gen_s, version, batches, stop, out)),
        ctx.Process(target=trainer, args=(train_s, steps, version, batches, done, out)),
    ]
    for p in procs:
        p.start()
    windows = []
    for step in range(steps):
        a = time.time_ns()
        with traced_phase("step", step=step):
            done.get(timeout=120)
        windows.append((a, time.time_ns()))
    stop.set()
    found = dict((name, (spans, syncs)) for name, spans, syncs in (out.get(timeout=60) for _ in procs))
    for p in procs:
        p.join(60)
    lens_rl.shutdown_telemetry(5000)
    with open(clock, "w") as f:
        json.dump(
            {
                "steps": windows,
                "generation": found["rollout"][0],
                "syncs": found["rollout"][1],
                "training": found["trainer"][0],
            },
            f,
        )


if __name__ == "__main__":
    main()
