"""veRL's own timers in a loop shaped like its PPO trainer's ``fit``, woven by lens_rl: run it as it is.

    pip install lens-rl torch==2.13.0 verl==0.9.1 cachetools uvicorn fastapi
    python examples/verl_loop.py                      # lens_rl.instrument("verl") inside
    lens-rl run -- python examples/verl_loop.py --plain   # no lens_rl code at all: `lens-rl run` weaves it
    lens-rl goodput lens_traces

Each step is veRL 0.9.1's ``RayPPOTrainer.fit`` in miniature: the same ``marked_timer`` names (``gen``,
``reward``, ``old_log_prob``, ``ref``, ``values``, ``adv``, ``update_critic``, ``update_actor``,
``update_weights``, ``testing``, ``save_checkpoint``) inside the ``step`` timer, the trainer's
``global_steps`` counting from 1, each phase a little CPU work with torch. veRL's ``timing_raw`` of each step is
printed beside lens_rl's own figures for it (``lens_rl.step_goodput()``), and written to ``--own`` as JSON.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import torch
from verl.utils.profiler import marked_timer, simple_timer

#: (timer name, seconds of work) in the order veRL's fit runs them
PHASES = (
    ("gen", 0.040),
    ("reward", 0.010),
    ("old_log_prob", 0.015),
    ("ref", 0.012),
    ("values", 0.010),
    ("adv", 0.004),
    ("update_critic", 0.020),
    ("update_actor", 0.030),
    ("update_weights", 0.008),
)


def work(seconds: float) -> None:
    """A little real compute, then the rest of ``seconds`` asleep (a GPU kernel's wait, on a CPU)."""
    end = time.perf_counter() + seconds
    a = torch.randn(64, 64)
    for _ in range(4):
        a = torch.tanh(a @ a)
    time.sleep(max(end - time.perf_counter(), 0.0))


class LoopTrainer:
    """The shape of ``verl.trainer.ppo.ray_trainer.RayPPOTrainer.fit``, with no workers behind it."""

    def __init__(self, steps: int, test_freq: int = 2) -> None:
        self.total_training_steps = steps
        self.test_freq = test_freq
        self.global_steps = 0

    def fit(self) -> list[dict[str, Any]]:
        own = []
        self.global_steps += 1  # veRL starts from step 1
        while self.global_steps <= self.total_training_steps:
            timing_raw: dict[str, float] = {}
            with marked_timer("start_profile", timing_raw):
                pass
            is_last_step = self.global_steps >= self.total_training_steps
            with marked_timer("step", timing_raw):
                for name, seconds in PHASES:
                    with marked_timer(name, timing_raw, color="blue"):
                        if name == "gen":  # the agent loop's own timer, inside gen
                            with simple_timer("generate_sequences", timing_raw):
                                work(seconds)
                        else:
                            work(seconds)
                if is_last_step or self.global_steps % self.test_freq == 0:
                    with marked_timer("testing", timing_raw, color="green"):
                        work(0.015)
                if is_last_step:
                    with marked_timer("save_checkpoint", timing_raw, color="green"):
                        work(0.010)
            with marked_timer("stop_profile", timing_raw):
                pass
            own.append({"step": self.global_steps, "timing_raw": timing_raw, "lens_rl": _lens_step()})
            self.global_steps += 1
        return own


def _lens_step() -> dict[str, Any] | None:
    """lens_rl's live figures of the step that just ended (None when lens_rl is not loaded)."""
    import sys

    lens_rl = sys.modules.get("lens_rl")
    return lens_rl.step_goodput() if lens_rl is not None else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--trace-dir", default="lens_traces")
    parser.add_argument("--run-id", default=None)
    parser.add_argument("--own", default=None, help="write veRL's timing_raw of each step here (JSON)")
    parser.add_argument("--plain", action="store_true", help="no lens_rl code (run it under `lens-rl run`)")
    args = parser.parse_args()

    if not args.plain:
        import lens_rl

        telemetry = {"enabled": True, "trace_dir": args.trace_dir, "metrics_enabled": False}
        if args.run_id:
            telemetry["run_id"] = args.run_id
        lens_rl.init_telemetry_driver({"telemetry": telemetry}, algorithm="ppo")
        lens_rl.instrument("verl")
    own = LoopTrainer(args.steps).fit()
    if not args.plain:
        lens_rl.shutdown_telemetry()

    print(f"{'step':>4} {'veRL step s':>12} {'lens_rl wall s':>15} {'goodput':>8}")
    for row in own:
        mine = row["lens_rl"] or {}
        wall = mine.get("wall_s")
        goodput = mine.get("goodput")
        print(
            f"{row['step']:>4} {row['timing_raw']['step']:>12.4f} "
            f"{wall if wall is not None else float('nan'):>15.4f} {goodput if goodput is not None else float('nan'):>8.3f}"
        )
    if args.own:
        with open(args.own, "w") as f:
            json.dump(own, f)
    if not args.plain:
        print(f"lens_rl's store: {args.trace_dir}    read it: lens-rl goodput {args.trace_dir}")


if __name__ == "__main__":
    main()
