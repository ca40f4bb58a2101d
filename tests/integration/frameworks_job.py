"""Jobs shaped like the ones people run, on one real local Ray cluster, each timed by itself with perf_counter.

Run as __main__ by test_frameworks.py (its actor classes ship by value). argv: trace_dir, output JSON path.
Four runs, one after another, each its own run id: a sync GRPO loop with lens_rl's names; an async loop
whose trainer waits on a generation buffer (NeMo-RL's ``exposed_generation``) while a generation actor keeps
filling it; a loop with NeMo-RL's own timer names; one with veRL's. Each step's own figures (what the job
measured: wall, and the seconds of the phases it counts as productive) go to the output for comparison with
``lens-rl goodput``.
"""

import json
import sys
import threading
import time

import ray

import lens_rl
from lens_rl import traced_phase, traced_worker_init
from lens_rl.integrations.ray import accepts_context, actor_options, flush_actors, traced_actor

STEPS = 4


@traced_worker_init("policy.init", worker_group="lm_policy")
class Policy:
    def __init__(self) -> None:
        pass

    @accepts_context
    @traced_phase("policy_training")
    def train(self, seconds: float) -> float:
        time.sleep(seconds)
        return seconds

    @accepts_context
    def work(self, name: str, seconds: float) -> float:  # a phase named by the caller (a framework's timer name)
        with traced_phase(name):
            time.sleep(seconds)
        return seconds


@traced_worker_init("generation.init", worker_group="vllm_policy")
class Generator:
    def __init__(self) -> None:
        self.stop = threading.Event()
        self.thread = None

    @accepts_context
    @traced_phase("generation")
    def generate(self, seconds: float) -> int:
        time.sleep(seconds)
        lens_rl.current_span().set_attribute("rl.num_tokens", 1000)
        return 1000

    def start_filling(self, queue, seconds: float) -> bool:  # async RL: generation runs on, into a buffer
        def fill():
            step = 0
            while not self.stop.is_set():
                with traced_phase("generation", step=step) as span:
                    time.sleep(seconds)
                    span.set_attribute("rl.num_tokens", 2000)
                queue.put(step)
                step += 1

        self.thread = threading.Thread(target=fill, daemon=True)
        self.thread.start()
        return True

    def stop_filling(self) -> bool:
        self.stop.set()
        self.thread.join(5)
        return True


def timed(own: dict, productive: bool, name: str, fn, *args):
    """Run a phase, timing it the way the job itself would."""
    t = time.perf_counter()
    with traced_phase(name):
        result = fn(*args)
    if productive:
        own["productive_s"] += time.perf_counter() - t
    return result


def start(run_id: str, trace_dir: str) -> None:
    lens_rl.init_telemetry_driver(
        {"telemetry": {"enabled": True, "trace_dir": trace_dir, "run_id": run_id, "metrics_enabled": False}}, "grpo"
    )


def actors(n_policy: int = 2):
    policy_cls = ray.remote(num_cpus=0)(Policy)
    policy = [
        traced_actor(policy_cls.options(**actor_options("lm_policy", r, n_policy)).remote()) for r in range(n_policy)
    ]
    gen = traced_actor(ray.remote(num_cpus=0)(Generator).options(**actor_options("vllm_policy", 0, 1)).remote())
    ray.get([p.train.remote(0.0) for p in policy] + [gen.generate.remote(0.0)])
    return policy, gen


def finish(workers) -> None:
    flush_actors(workers, 5000)
    for worker in workers:
        ray.kill(worker)
    lens_rl.shutdown_telemetry(5000)


def sync_loop(trace_dir: str) -> list[dict]:
    """lens_rl's names: generation, reward, logprob and training productive; weight sync overhead."""
    start("sync", trace_dir)
    policy, gen = actors()
    steps = []
    for step in range(STEPS):
        own = {"step": step, "productive_s": 0.0}
        t0 = time.perf_counter()
        with traced_phase("step", step=step):
            timed(own, True, "generation", lambda: ray.get(gen.generate.remote(0.15)))
            timed(own, True, "reward", time.sleep, 0.03)
            timed(own, True, "logprob", lambda: ray.get([p.work.remote("logprob", 0.05) for p in policy]))
            timed(own, True, "policy_training", lambda: ray.get([p.train.remote(0.12) for p in policy]))
            timed(own, False, "weight_sync", time.sleep, 0.04)
            time.sleep(0.03)  # logging: no bucket
        own["wall_s"] = time.perf_counter() - t0
        steps.append(own)
    finish([*policy, gen])
    return steps


def async_loop(trace_dir: str) -> list[dict]:
    """Async GRPO: generation fills a buffer all along; the trainer waits on it (exposed_generation, idle)."""
    from ray.util.queue import Queue

    start("async", trace_dir)
    policy, gen = actors()
    buffer = Queue(maxsize=2)
    ray.get(gen.start_filling.remote(buffer, 0.2))
    steps = []
    for step in range(STEPS):
        own = {"step": step, "productive_s": 0.0}
        t0 = time.perf_counter()
        with traced_phase("step", step=step):
            timed(own, False, "exposed_generation", buffer.get)
            timed(own, True, "policy_training", lambda: ray.get([p.train.remote(0.12) for p in policy]))
            timed(own, False, "weight_sync", time.sleep, 0.03)
        own["wall_s"] = time.perf_counter() - t0
        steps.append(own)
    ray.get(gen.stop_filling.remote())
    finish([*policy, gen])
    return steps


def named_loop(trace_dir: str, run_id: str, umbrella: str, phases: list[tuple[str, float, bool, bool]]) -> list[dict]:
    """A framework's own timer names: (name, seconds, productive to the framework, run on the policy workers)."""
    start(run_id, trace_dir)
    policy, gen = actors()
    steps = []
    for step in range(STEPS):
        own = {"step": step, "productive_s": 0.0}
        t0 = time.perf_counter()
        with traced_phase(umbrella, step=step):
            for name, seconds, productive, remote in phases:
                if remote:
                    timed(
                        own, productive, name, lambda n=name, s=seconds: ray.get([p.work.remote(n, s) for p in policy])
                    )
                else:
                    timed(own, productive, name, time.sleep, seconds)
        own["wall_s"] = time.perf_counter() - t0
        steps.append(own)
    finish([*policy, gen])
    return steps


NEMO_RL = [
    ("data_processing", 0.02, False, False),
    ("prepare_for_generation/total", 0.03, False, False),
    ("generation", 0.1, True, False),
    ("reward_calculation", 0.03, True, False),
    ("logprob_inference_prep", 0.02, False, False),
    ("policy_and_reference_logprobs", 0.05, True, True),
    ("advantage_calculation", 0.02, True, False),
    ("training_prep", 0.02, False, False),
    ("policy_training", 0.1, True, True),
]
VERL = [
    ("gen", 0.1, True, False),
    ("reward", 0.03, True, False),
    ("old_log_prob", 0.05, True, True),
    ("ref", 0.04, True, True),
    ("adv", 0.02, True, False),
    ("update_actor", 0.1, True, True),
    ("testing", 0.04, False, False),
]


def main() -> None:
    trace_dir, out = sys.argv[1], sys.argv[2]
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    result = {
        "sync": sync_loop(trace_dir),
        "async": async_loop(trace_dir),
        "nemo_rl": named_loop(trace_dir, "nemo_rl", "total_step_time", NEMO_RL),
        "verl": named_loop(trace_dir, "verl", "step", VERL),
    }
    ray.shutdown()
    with open(out, "w") as handle:
        json.dump(result, handle)


if __name__ == "__main__":
    main()
