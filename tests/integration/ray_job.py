"""A small Ray job run as __main__ by test_ray.py: its actor class ships by value.

argv: OTLP endpoint, output JSON path.
"""

import json
import os
import sys

import ray

import lens_rl
from lens_rl import traced_phase, traced_worker_init, with_bucket
from lens_rl.integrations.ray import accepts_context, actor_options, flush_actors, traced_actor


@traced_worker_init("policy.init", worker_group="lm_policy")
class PolicyWorker:
    def __init__(self) -> None:
        self.rank = int(os.environ["RANK"])

    def train(self, step: int, carrier: dict) -> int:
        with traced_phase("policy_training", parent=carrier, step=step):
            return self.rank

    @accepts_context
    @traced_phase("logprob")
    def logprob(self, scale: int = 1) -> int:
        lens_rl.current_span().set_attribute("rl.scale", scale)
        return self.rank * scale

    def pid(self) -> int:
        return os.getpid()


def main() -> None:
    endpoint, out = sys.argv[1], sys.argv[2]
    master = {
        "telemetry": {"enabled": True, "exporter": "otlp", "endpoint": endpoint, "metrics_interval_ms": 1000},
        "policy": {"model_name": "tiny-gpt", "precision": "bfloat16"},
    }
    lens_rl.init_telemetry_driver(master, algorithm="grpo")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    policy_cls = ray.remote(num_cpus=0)(PolicyWorker)
    workers = [policy_cls.options(**actor_options("lm_policy", rank, 2)).remote() for rank in range(2)]
    result = {}
    with traced_phase("step", step=1):
        carrier = lens_rl.inject_context()
        result["ranks"] = ray.get([w.train.remote(1, carrier) for w in workers])
        result["logprob"] = ray.get([traced_actor(w).logprob.remote(scale=3) for w in workers])
        result["plain_call"] = ray.get(workers[0].logprob.remote())  # callers need not change
        with with_bucket("overhead"):  # validation: overhead on the worker too
            result["validation"] = ray.get(traced_actor(workers[0]).logprob.remote(scale=5))
    result["pids"] = ray.get([w.pid.remote() for w in workers])
    result["flushed"] = flush_actors(workers, timeout_ms=5000)
    result["driver_shutdown"] = lens_rl.shutdown_telemetry(5000)
    ray.shutdown()
    with open(out, "w") as handle:
        json.dump(result, handle)


if __name__ == "__main__":
    main()
