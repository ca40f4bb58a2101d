"""veRL 0.9.1's fully async path in miniature, with no lens_rl code: run it under ``lens-rl run --instrument verl``.

    python tests/frameworks/verl_async_job.py OWN.json [--steps N]

veRL's own objects, on the CPU: a rollout client (``LLMServerClient``, its real ``generate``) asks one replica
that answers with its weight version in ``extra_fields["global_steps"]`` (what ``vLLMHttpServer`` does after
``set_global_steps``); each answer becomes a ``RolloutSample`` in a queue; a trainer (a real
``SeparateRayPPOTrainer``, the base of ``FullyAsyncTrainer``, its real ``_fit_update_actor``) takes the oldest
samples each step through the real ``assemble_batch_from_rollout_samples`` inside ``marked_timer("gen")``,
updates the actor, then syncs its weights (``timing_s/param_sync``, ``current_param_version`` + 1) and sets the
replica's version. Only Ray's load balancer and the GPU work are stood in for (a replica object, torch on the
CPU). What veRL's objects said each step (the batch's ``trajectory_param_versions`` and ``global_token_num``, the
trainer's ``current_param_version``, the version each response carried) is written to OWN.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

import numpy as np
import torch
from omegaconf import OmegaConf
from verl import DataProto
from verl.experimental.fully_async_policy.detach_utils import RolloutSample, assemble_batch_from_rollout_samples
from verl.experimental.separation.ray_trainer import SeparateRayPPOTrainer
from verl.utils.profiler import marked_timer, simple_timer
from verl.workers.rollout.llm_server import LLMServerClient
from verl.workers.rollout.replica import TokenOutput

CONFIG = OmegaConf.create(
    {"trainer": {"critic_warmup": 0, "balance_batch": False}, "actor_rollout_ref": {"rollout": {"name": "vllm"}}}
)
PER_STEP = 3  # samples the trainer takes a step
MADE_PER_STEP = 2  # samples generated between two steps (fewer: the queue's samples age)
WIDTH = 8  # response tokens at most


class _Remote:
    def __init__(self, fn: Any) -> None:
        self.remote = fn


class Replica:
    """One rollout replica as the client sees it: ``generate.remote(...)``, its weights' version set by the
    trainer's sync (``vLLMHttpServer.set_global_steps``)."""

    def __init__(self) -> None:
        self.global_steps: int | None = None
        self.generate = _Remote(self._generate)
        self.made = 0

    async def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = global_steps

    async def _generate(self, *, request_id: str, prompt_ids: list[int], sampling_params: dict[str, Any], **_: Any):
        await asyncio.sleep(0.004)
        self.made += 1
        tokens = [7] * (3 + self.made % 4)  # responses of different lengths: tokens weigh
        return TokenOutput(token_ids=tokens, extra_fields={"global_steps": self.global_steps})


class Client(LLMServerClient):
    """veRL's client; only the load balancer's Ray calls are stood in for (one replica)."""

    def __init__(self, replica: Replica) -> None:
        super().__init__(CONFIG, None)
        self.replica = replica

    async def _acquire_server(self, request_id: str, **extra: Any) -> tuple[str, Any]:
        return "replica-0", self.replica

    def _release_server(self, server_id: str, request_id: str | None = None) -> None:
        pass


async def rollout(client: Client, count: int, seen: list[Any]) -> list[RolloutSample]:
    """``count`` samples, one request each, timed as veRL's agent loop times them."""
    samples = []
    for n in range(count):
        metrics: dict[str, float] = {}
        with simple_timer("generate_sequences", metrics):
            out = await client.generate(f"req-{n}", prompt_ids=[1, 2, 3, 4], sampling_params={})
        seen.append(out.extra_fields["global_steps"])
        prompt, response = 4, len(out.token_ids)  # (padded to the batch's width, as veRL pads them)
        mask = torch.zeros(1, prompt + WIDTH, dtype=torch.int64)
        mask[0, : prompt + response] = 1
        batch = DataProto.from_dict(
            tensors={"attention_mask": mask, "response_mask": mask[:, prompt:].clone()},
            non_tensors={
                "min_global_steps": np.array([out.extra_fields["min_global_steps"]], dtype=object),
                "max_global_steps": np.array([out.extra_fields["max_global_steps"]], dtype=object),
            },
            meta_info={"metrics": [{"generate_sequences": metrics["generate_sequences"], "tool_calls": 0.0}]},
        )
        samples.append(RolloutSample(full_batch=batch, sample_id=f"s{n}", epoch=0, rollout_status={}))
    return samples


class Trainer(SeparateRayPPOTrainer):
    """``FullyAsyncTrainer``'s step over veRL's own base class (no workers: the actor update is CPU work)."""

    def __init__(self, replica: Replica) -> None:  # (no Ray workers to build)
        self.config = CONFIG
        self.replica = replica
        self.global_steps = 1
        self.current_param_version = 0
        self.metrics: dict[str, Any] = {}
        self.timing_raw: dict[str, float] = {}

    def _update_actor(self, batch: DataProto) -> DataProto:
        a = torch.randn(64, 64)
        for _ in range(6):
            a = torch.tanh(a @ a)
        time.sleep(0.01)
        return DataProto(meta_info={"metrics": {"actor/loss": [float(a.mean())]}})

    def fit_step(self, queue: list[RolloutSample]) -> dict[str, Any]:
        self.metrics, self.timing_raw = {}, {}
        with marked_timer("step", self.timing_raw):
            with marked_timer("gen", self.timing_raw):
                taken, queue[:] = queue[:PER_STEP], queue[PER_STEP:]
                batch = assemble_batch_from_rollout_samples(taken, None, CONFIG, None)
            said = {
                "step": self.global_steps,
                "policy": self.current_param_version,
                "versions": [int(v) for v in batch.meta_info["trajectory_param_versions"]],
                "tokens": [int(t) for t in batch.meta_info["global_token_num"]],
            }
            self._fit_update_actor(batch)
            with marked_timer("timing_s/param_sync", self.timing_raw):
                time.sleep(0.005)
                self.current_param_version += 1
                asyncio.run(self.replica.set_global_steps(self.current_param_version))
        self.global_steps += 1
        return said


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("own")
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    replica = Replica()
    asyncio.run(replica.set_global_steps(0))
    client, trainer = Client(replica), Trainer(replica)
    seen: list[Any] = []
    queue = asyncio.run(rollout(client, 2 * PER_STEP, seen))  # a backlog: the first steps train on older samples
    steps = []
    for _ in range(args.steps):
        queue.extend(asyncio.run(rollout(client, MADE_PER_STEP, seen)))
        while len(queue) < PER_STEP:
            queue.extend(asyncio.run(rollout(client, 1, seen)))
        steps.append(trainer.fit_step(queue))
    with open(args.own, "w") as out:
        json.dump({"steps": steps, "response_versions": seen}, out)


if __name__ == "__main__":
    main()
