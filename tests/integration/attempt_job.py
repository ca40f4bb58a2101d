"""One attempt of a training job that checkpoints and resumes: run as __main__ by the attempts tests.

argv[1]: a JSON object: ``trace_dir``, ``run_id``, ``first`` and ``last`` step (inclusive), ``step_s`` (the
productive phase of a step), ``end`` (``clean``; ``exit``: ``os._exit`` halfway through step ``at``;
``raise``: an uncaught exception there; ``hang``: sleeps there until killed), ``timeline`` (a JSON lines
file this job appends what a reference recorder would be told: the attempt's start, each step's start,
the clean end), ``ray`` (two Ray actors train each step: a worker group of two ranks).

The attempt's start is ``LENS_RL_OTEL_LAUNCH_TIME`` (the test sets it as it launches the process), so both
lens_rl and the reference start the attempt at the same instant. Prints ``step N`` as each step starts.
"""

import json
import os
import sys
import time

import lens_rl
from lens_rl import traced_phase, traced_worker_init


@traced_worker_init("policy.init", worker_group="lm_policy")
class Trainer:
    def __init__(self) -> None:
        pass

    def train(self, step: int, seconds: float, carrier: dict) -> bool:
        with traced_phase("policy_training", step=step, parent=carrier):
            time.sleep(seconds)
        return lens_rl.flush_telemetry(2000)


def main() -> None:
    job = json.loads(sys.argv[1])
    timeline = open(job["timeline"], "a", buffering=1)

    def note(**entry: object) -> None:
        timeline.write(json.dumps(entry) + "\n")

    note(job_start=float(os.environ["LENS_RL_OTEL_LAUNCH_TIME"]))
    lens_rl.init_telemetry_driver(
        {"telemetry": {"enabled": True, "trace_dir": job["trace_dir"], "run_id": job["run_id"]}}, algorithm="grpo"
    )
    trainers = []
    if job.get("ray"):
        import ray

        from lens_rl.integrations.ray import actor_options, flush_actors

        ray.init(num_cpus=2, include_dashboard=False, logging_level=40)
        trainers = [
            ray.remote(num_cpus=0)(Trainer).options(**actor_options("lm_policy", rank, 2)).remote() for rank in (0, 1)
        ]
        ray.get([t.__ray_ready__.remote() for t in trainers])
    for step in range(job["first"], job["last"] + 1):
        with traced_phase("step", step=step):
            note(step=step, t=time.time())
            print(f"step {step}", flush=True)
            crash = step == job.get("at")
            with traced_phase("policy_training", step=step):
                if trainers:
                    carrier = lens_rl.inject_context()
                    half = job["step_s"] / 2 if crash else job["step_s"]
                    ray.get([t.train.remote(step, half, carrier) for t in trainers])
                else:
                    time.sleep(job["step_s"] / 2 if crash else job["step_s"])
                if crash and job["end"] == "exit":
                    os._exit(3)
                if crash and job["end"] == "raise":
                    raise RuntimeError(f"CUDA out of memory in step {step}")
                if crash and job["end"] == "hang":
                    time.sleep(600)
        lens_rl.flush_telemetry(2000)
    if trainers:
        flush_actors(trainers, timeout_ms=5000)
    note(job_end=time.time())
    lens_rl.shutdown_telemetry(5000)
    if trainers:
        ray.shutdown()


if __name__ == "__main__":
    main()


def run_attempt(
    tmp: str,
    run_id: str,
    first: int,
    last: int,
    *,
    end: str = "clean",
    at: int | None = None,
    step_s: float = 0.2,
    ray: bool = False,
    env: dict[str, str] | None = None,
    kill: bool = False,
) -> int:
    """One attempt in a fresh interpreter (its launch time set as it starts); with ``kill``, SIGKILL it halfway
    through step ``at`` (``end`` should be ``hang``). Returns its exit status."""
    import signal
    import subprocess

    from tests.conftest import clean_env

    job = {
        "trace_dir": os.path.join(tmp, "traces"),
        "run_id": run_id,
        "first": first,
        "last": last,
        "step_s": step_s,
        "end": end,
        "at": at,
        "timeline": os.path.join(tmp, f"{run_id}.timeline.jsonl"),
        "ray": ray,
    }
    environ = clean_env({"LENS_RL_OTEL_LAUNCH_TIME": repr(time.time()), **(env or {})})
    proc = subprocess.Popen(
        [sys.executable, __file__, json.dumps(job)],
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp,
    )
    if kill:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.strip() == f"step {at}":
                time.sleep(step_s / 2)
                proc.send_signal(signal.SIGKILL)
                break
    proc.wait(timeout=180)
    return proc.returncode


def timeline(tmp: str, run_id: str) -> list[dict]:
    """What the attempts told the reference recorder, in order."""
    with open(os.path.join(tmp, f"{run_id}.timeline.jsonl")) as handle:
        return [json.loads(line) for line in handle]
