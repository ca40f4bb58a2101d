"""A driver and two Ray trainers, one of which blocks in a phase far past its learned timeout: run as
__main__ by test_live.py. argv: trace_dir, a folder where the test drops ``release`` (the job then ends).

Steps 0 and 1 train 0.1 s on both ranks (the timeout learned: max(hang_timeout_s, 5 x 0.1 s)); in step 2
rank 1 blocks for ``BLOCK_S``. Prints ``blocking`` as step 2 starts, ``pids <rank0> <rank1>`` once the
trainers are up, ``trained`` after step 2; then waits for the test's ``release`` file.
"""

import os
import sys
import time

import ray

import lens_rl
from lens_rl import traced_phase, traced_worker_init
from lens_rl.integrations.ray import actor_options

BLOCK_S = 4.0


@traced_worker_init("policy.init", worker_group="lm_policy")
class Trainer:
    def __init__(self, rank: int) -> None:
        self.rank = rank

    def pid(self) -> int:
        return os.getpid()

    def train(self, step: int) -> bool:
        with traced_phase("policy_training", step=step):
            time.sleep(BLOCK_S if step == 2 and self.rank == 1 else 0.1)
        return lens_rl.flush_telemetry(2000)


def main() -> None:
    trace_dir, control = sys.argv[1], sys.argv[2]
    lens_rl.init_telemetry_driver({"telemetry": {"enabled": True, "trace_dir": trace_dir, "run_id": "live"}})
    ray.init(num_cpus=2, include_dashboard=False, logging_level=40)
    trainers = [
        ray.remote(num_cpus=0)(Trainer).options(**actor_options("lm_policy", rank, 2)).remote(rank) for rank in (0, 1)
    ]
    print("pids", *ray.get([t.pid.remote() for t in trainers]), flush=True)
    for step in range(3):
        with traced_phase("step", step=step):
            if step == 2:
                print("blocking", flush=True)
            with traced_phase("policy_training", step=step):
                ray.get([t.train.remote(step) for t in trainers])
        lens_rl.flush_telemetry(2000)
    print("trained", flush=True)
    while not os.path.exists(os.path.join(control, "release")):
        time.sleep(0.05)
    lens_rl.shutdown_telemetry(5000)
    ray.shutdown()


if __name__ == "__main__":
    main()
