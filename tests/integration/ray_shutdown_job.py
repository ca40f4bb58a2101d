"""A Ray job that ends the ordinary way, run as __main__ by test_ray.py (no flush_actors anywhere).

argv: trace dir, mode: "shutdown" (ray.shutdown(), then shutdown_telemetry) or "exit" (just return).
"""

import sys

import ray

import lens_rl
from lens_rl import traced_phase, traced_worker_init
from lens_rl.integrations.ray import actor_options


@traced_worker_init("policy.init", worker_group="lm_policy")
class PolicyWorker:
    def train(self, step: int, carrier: dict) -> int:
        with traced_phase("policy_training", parent=carrier, step=step):
            return step


class Generator:  # not decorated: known to lens_rl through actor_options
    def generate(self, step: int, carrier: dict) -> int:
        with traced_phase("generation", parent=carrier, step=step):
            return step


def main() -> None:
    trace_dir, mode = sys.argv[1], sys.argv[2]
    # A long metrics interval and no flush anywhere: only the shutdown path can deliver the last spans.
    lens_rl.init_telemetry_driver(
        {"telemetry": {"enabled": True, "trace_dir": trace_dir, "run_id": "r", "metrics_interval_ms": 600000}}, "grpo"
    )
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    policy = ray.remote(num_cpus=0)(PolicyWorker).remote()
    generator = ray.remote(num_cpus=0)(Generator).options(**actor_options("vllm_policy", 0, 1)).remote()
    for step in range(3):
        with traced_phase("step", step=step):
            carrier = lens_rl.inject_context()
            ray.get([policy.train.remote(step, carrier), generator.generate.remote(step, carrier)])
    if mode == "shutdown":
        ray.shutdown()
        print("TELEMETRY_OK", lens_rl.shutdown_telemetry(5000))


if __name__ == "__main__":
    main()
