"""``lens-rl demo``: a small GRPO-shaped job on a local Ray cluster, fully traced.

The driver runs the loop; a policy worker group of two actors computes log-probs and
trains; a generation actor (standing in for vLLM) generates and asks an aiohttp
rollout server for rewards, the server continuing the caller's trace. Every phase is
a bucketed span in the embedded file store (or sent to ``--otlp``). At the end it
prints the goodput table and where the trace and the Perfetto file are.

The work is simulated with short sleeps so the demo runs in well under a minute on
two cores; the telemetry is real.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

from lens_rl._errors import MissingExtraError, require
from lens_rl.buckets import Bucket
from lens_rl.config import mask_url
from lens_rl.integrations.aiohttp import instrument_aiohttp_client
from lens_rl.integrations.ray import accepts_context, actor_options, flush_actors, traced_actor
from lens_rl.lifecycle import flush_telemetry, init_telemetry_driver, shutdown_telemetry
from lens_rl.record.phases import traced_phase
from lens_rl.record.scopes import with_bucket
from lens_rl.record.spans import current_span
from lens_rl.record.steps import step_goodput
from lens_rl.record.worker_init import traced_worker_init

__all__ = ["GenerationWorker", "PolicyWorker", "RolloutServer", "run_demo"]


@traced_worker_init("policy.init", worker_group="lm_policy")
class PolicyWorker:
    """One rank of the policy: loads a model, computes log-probs, trains, syncs weights."""

    def __init__(self) -> None:
        self.rank = int(os.environ.get("RANK", "0"))
        with traced_phase("model_load"):
            time.sleep(0.2)

    @accepts_context
    @traced_phase("logprob")
    def logprob(self, step: int) -> float:
        time.sleep(0.06)
        return -1.0 / step

    @accepts_context
    @traced_phase("policy_training")
    def train(self, step: int) -> float:
        time.sleep(0.15)
        return 1.0 / step

    @accepts_context
    @traced_phase("weight_sync")
    def export_weights(self, step: int) -> int:
        time.sleep(0.03)
        return step

    @accepts_context
    @traced_phase("checkpointing")
    def save(self, step: int) -> str:
        time.sleep(0.1)
        return f"ckpt-{step}-rank{self.rank}"


@traced_worker_init("generation.init", worker_group="vllm_policy")
class GenerationWorker:
    """Generates rollouts (sleeps) and scores them through the rollout server over HTTP."""

    def __init__(self, rollout_url: str) -> None:
        instrument_aiohttp_client()  # before any ClientSession exists
        self.url = rollout_url
        with traced_phase("model_load"):
            time.sleep(0.2)

    @accepts_context
    @traced_phase("generation")
    async def generate(self, step: int, n: int) -> list[str]:
        await asyncio.sleep(0.02 * n)
        current_span().set_attribute("rl.num_tokens", 256 * n)  # what a vLLM worker reports: tokens/s
        return [f"step{step}-sample{i}" for i in range(n)]

    @accepts_context
    @traced_phase("reward")
    async def score(self, samples: list[str]) -> list[float]:
        import aiohttp

        async with aiohttp.ClientSession() as session:
            async with session.post(self.url + "/score", json={"samples": samples}) as resp:
                resp.raise_for_status()
                return list((await resp.json())["rewards"])

    @accepts_context
    @traced_phase("weight_sync")
    def load_weights(self, step: int) -> int:
        time.sleep(0.03)
        return step


@traced_worker_init("rollout_server.init", worker_group="rollout_server")
class RolloutServer:
    """An aiohttp rollout server: scores samples, continuing the caller's trace."""

    def __init__(self) -> None:
        self.runner: Any = None

    async def start(self) -> str:
        from aiohttp import web

        from lens_rl.integrations.aiohttp import tracing_middleware

        app = web.Application(middlewares=[tracing_middleware()])
        app.router.add_post("/score", self._score)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        return f"http://127.0.0.1:{self.runner.addresses[0][1]}"

    async def _score(self, request: Any) -> Any:
        from aiohttp import web

        samples = (await request.json())["samples"]
        with traced_phase("reward_model", attributes={"rl.num_samples": len(samples)}):
            await asyncio.sleep(0.05)
            rewards = [random.random() for _ in samples]
        return web.json_response({"rewards": rewards})


def _start_cluster(ray: Any) -> tuple[Any, Any, list[Any]]:
    """Start Ray and the job's actors; wait until every actor is up."""
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    server = ray.remote(num_cpus=0)(RolloutServer).options(**actor_options("rollout_server", 0, 1)).remote()
    url = ray.get(server.start.remote())
    gen = traced_actor(
        ray.remote(num_cpus=0)(GenerationWorker).options(**actor_options("vllm_policy", 0, 1)).remote(url)
    )
    policy_cls = ray.remote(num_cpus=0)(PolicyWorker)
    policy = [traced_actor(policy_cls.options(**actor_options("lm_policy", r, 2)).remote()) for r in range(2)]
    ray.get([p.logprob.remote(1) for p in policy] + [gen.load_weights.remote(0)])
    return server, gen, policy


def run_demo(steps: int = 4, trace_dir: str = "lens_traces", otlp: str | None = None, out: Any = None) -> int:
    """Run the demo job; returns the exit status. Prints progress and the goodput table."""
    out = out or sys.stdout

    def say(text: str) -> None:
        print(text, file=out, flush=True)

    try:
        require("aiohttp", "ray,aiohttp", "the demo")
        ray = require("ray", "ray,aiohttp", "the demo")
    except MissingExtraError as exc:
        print(f"lens-rl: error: {exc}", file=sys.stderr)
        return 2
    if steps < 1:
        print(f"lens-rl: error: --steps must be at least 1, got {steps}", file=sys.stderr)
        return 2

    handle = init_telemetry_driver(_master_config(trace_dir, otlp), algorithm="grpo")
    assert handle is not None  # enabled by the master config
    run_id = str(handle.resource.attributes["rl.run_id"])
    # (where the spans went: the environment wins over the demo's config, under `lens-rl run --trace-dir A` too)
    config = handle.config
    trace_dir = config.trace_dir
    otlp = mask_url(config.resolved_endpoint) if config.exporter == "otlp" else otlp
    say(f"lens-rl demo: run {run_id}, {steps} GRPO steps on a local Ray cluster")
    t_start = time.perf_counter()
    try:
        flushed = _train(ray, steps, say)
    finally:
        ok = shutdown_telemetry(5000)
        ray.shutdown()
    say(f"  telemetry exported: driver {'ok' if ok else 'INCOMPLETE'}, workers {sum(flushed)}/{len(flushed)} flushed")
    if config.exporter != "file":
        to = f"sent to {otlp}" if config.exporter == "otlp" else f"given to the {config.exporter} exporter"
        say(f"spans and metrics {to}; the goodput table reads the file store (run without --otlp)")
        return 0 if ok else 1

    _read_back(trace_dir, run_id, say)
    say(f"done in {time.perf_counter() - t_start:.1f}s")
    return 0 if ok else 1


def _master_config(trace_dir: str, otlp: str | None) -> dict[str, Any]:
    """The demo job's master config: telemetry on (to the file store, or ``otlp``), a tiny policy's facts."""
    telemetry: dict[str, Any] = {"enabled": True, "trace_dir": trace_dir, "metrics_interval_ms": 2000}
    if otlp:
        telemetry.update(exporter="otlp", endpoint=otlp)
    return {
        "telemetry": telemetry,
        "policy": {
            "model_name": "demo/tiny-policy-0.5B",
            "precision": "bfloat16",
            "dtensor_cfg": {"tensor_parallel_size": 1},
        },
        "cluster": {"num_nodes": 1, "gpus_per_node": 0},
    }


def _train(ray: Any, steps: int, say: Any) -> list[bool]:
    """The cluster started and ``steps`` GRPO steps run on it, each said; returns which actors flushed."""
    t_start = time.perf_counter()
    with traced_phase("cluster_setup"):  # start-up is overhead, not unattributed time
        server, gen, policy = _start_cluster(ray)
    say(f"  cluster up in {time.perf_counter() - t_start:.1f}s: 2 policy ranks, 1 generation worker, rollout server")
    for step in range(1, steps + 1):
        t0 = time.perf_counter()
        rewards = _step(ray, gen, policy, step, steps)
        mean = sum(rewards) / len(rewards)
        live = step_goodput() or {}  # what a user logs to W&B / TensorBoard / MLflow beside the loss
        ratio = live.get("goodput")
        say(
            f"  step {step}/{steps}: mean reward {mean:.3f}, {time.perf_counter() - t0:.2f}s, "
            f"live step goodput {'-' if ratio is None else f'{ratio:.0%}'}"
        )
        flush_telemetry(2000)
    return flush_actors([server, gen, *policy], timeout_ms=5000)


def _step(ray: Any, gen: Any, policy: list[Any], step: int, steps: int) -> list[float]:
    """One GRPO step on the cluster, each phase under its framework name; returns the rewards."""
    with traced_phase("step", step=step):
        with traced_phase("data_processing", step=step):
            time.sleep(0.03)
        if step == 2:  # a rollout thrown away: its time is wasted, on the worker too (carried bucket)
            with with_bucket(Bucket.WASTED), traced_phase("generation", step=step, attempt=1):
                ray.get(gen.generate.remote(step, 4))
        with traced_phase("generation", step=step):
            samples = ray.get(gen.generate.remote(step, 8))
        with traced_phase("reward", step=step):
            rewards = ray.get(gen.score.remote(samples))
        with traced_phase("logprob", step=step):
            ray.get([p.logprob.remote(step) for p in policy])
        with traced_phase("advantage", step=step):
            time.sleep(0.01)
        with traced_phase("policy_training", step=step):
            ray.get([p.train.remote(step) for p in policy])
        with traced_phase("weight_sync", step=step):
            ray.get([p.export_weights.remote(step) for p in policy] + [gen.load_weights.remote(step)])
        if step % 2 == 0:  # validation generation counts as overhead, not training
            with with_bucket(Bucket.OVERHEAD), traced_phase("validation", step=step):
                with traced_phase("generation", step=step):
                    ray.get(gen.generate.remote(step, 4))
        if step == steps:
            with traced_phase("checkpointing", step=step):
                ray.get([p.save.remote(step) for p in policy])
        with traced_phase("wait", step=step):  # waiting on the next batch: idle
            time.sleep(0.02)
        time.sleep(0.01)  # logging: covered by no bucketed span -> unattributed
    return list(rewards)


def _read_back(trace_dir: str, run_id: str, say: Any) -> None:
    """The goodput table, the Perfetto trace and the HTML report of the run just written."""
    from lens_rl.offline import analyze, format_table, write_trace
    from lens_rl.store import span_files

    run_dir = Path(trace_dir) / run_id
    paths = span_files(run_dir)
    report = analyze(paths, jobs=1)
    say("")
    say(format_table(report))
    perfetto_path = run_dir / "trace.perfetto.json"
    write_trace(paths, perfetto_path, jobs=1)
    say("")
    say(f"trace:    {run_dir}/  ({report['spans']} spans; `lens-rl goodput {trace_dir} --json` for machines)")
    say(f"perfetto: {perfetto_path}  (open it at https://ui.perfetto.dev)")
    try:
        from lens_rl.offline import write_report

        report_path = run_dir / "report.html"
        write_report(paths, report_path, jobs=1)
        say(f"report:   {report_path}  (one self-contained page: open it in a browser, offline)")
    except ImportError as exc:
        say(f"report:   not written ({exc})")
