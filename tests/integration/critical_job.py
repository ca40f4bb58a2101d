"""A driver and two Ray trainers, rank 1 slower (a sleep): run as __main__ by test_critical_ray.py.
argv: trace_dir. Four steps: both ranks train (0.1 s and 0.3 s), then the driver's advantage phase (0.05 s).
"""

import sys
import time

import ray

import lens_rl
from lens_rl import traced_phase, traced_worker_init
from lens_rl.integrations.ray import accepts_context, actor_options, flush_actors, traced_actor


@traced_worker_init("policy.init", worker_group="lm_policy")
class Trainer:
    def __init__(self, rank: int) -> None:
        self.rank = rank

    @accepts_context
    @traced_phase("policy_training")
    def train(self, step: int) -> int:
        time.sleep(0.3 if self.rank == 1 else 0.1)
        return step


def main() -> None:
    lens_rl.init_telemetry_driver({"telemetry": {"enabled": True, "trace_dir": sys.argv[1], "run_id": "cp"}}, "grpo")
    ray.init(num_cpus=2, include_dashboard=False, logging_level=40)
    trainers = [
        traced_actor(ray.remote(num_cpus=0)(Trainer).options(**actor_options("lm_policy", rank, 2)).remote(rank))
        for rank in (0, 1)
    ]
    ray.get([t.__ray_ready__.remote() for t in trainers])  # up before the first step (its start-up is not a step's)
    for step in range(4):
        with traced_phase("step", step=step):
            with traced_phase("policy_training"):
                ray.get([t.train.remote(step) for t in trainers])
            with traced_phase("advantage"):
                time.sleep(0.05)
    flush_actors(trainers, timeout_ms=5000)
    lens_rl.shutdown_telemetry(5000)
    ray.shutdown()


if __name__ == "__main__":
    main()
