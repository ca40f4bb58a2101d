"""Goodput vocabulary: `Bucket`, the default phase table and the exclusive-time rule.

A phase's bucket is, in order: the explicit ``bucket=`` argument, the innermost
``with_bucket`` scope, the bucket carried by the caller's context, the default for a
known RL phase name (:data:`DEFAULT_PHASE_BUCKETS`), else none (an umbrella span such
as a whole step). This module imports nothing of lens_rl: the live metrics and the
offline rollup both take :func:`exclusive_time` from here, so they agree.

Example::

    default_bucket("policy.generation")            # Bucket.PRODUCTIVE
    exclusive_time(0, 10, [(2, 5), (4, 6)])        # 6: the children's union is 4
"""

from __future__ import annotations

import enum
import functools
import re
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

__all__ = [
    "ALLOWED_BUCKETS",
    "COMPUTE_BUCKETS",
    "DEFAULT_PHASE_BUCKETS",
    "FLOP_FACTORS",
    "PHASE_KINDS",
    "PHASE_SOURCES",
    "TRAINING_PARTS",
    "VERDICTS",
    "WEIGHT_SYNC_PHASES",
    "Bucket",
    "claimed",
    "closest_phase_name",
    "coerce_bucket",
    "default_bucket",
    "exclusive_time",
    "family_of",
    "goodput_of",
    "is_weight_sync",
    "kind_of",
    "normalized",
    "staleness",
    "subtracted",
    "union_length",
    "verdict",
    "verdict_name",
    "weighted",
]


class Bucket(str, enum.Enum):
    """Where a phase's time goes. Values are the strings recorded as ``rl.bucket``."""

    PRODUCTIVE = "productive"
    OVERHEAD = "overhead"
    IDLE = "idle"
    WASTED = "wasted"

    def __str__(self) -> str:
        return self.value


_BY_VALUE = {b.value: b for b in Bucket}
ALLOWED_BUCKETS = ", ".join(_BY_VALUE)  # for error messages: what a bucket may be
#: The buckets whose time is compute, not waiting (idle is): what stragglers compare across ranks and
#: ``steps: auto`` chooses its culprit on (the rank that waited least: the most compute).
COMPUTE_BUCKETS = ("productive", "overhead", "wasted")


def coerce_bucket(value: object, *, field: str = "bucket") -> Bucket | None:
    """``value`` as a :class:`Bucket` (None stays None); ``ValueError`` naming what is allowed."""
    if value is None or value.__class__ is Bucket:
        return value  # type: ignore[return-value]
    if isinstance(value, str):
        bucket = _BY_VALUE.get(value.strip().lower())
        if bucket is not None:
            return bucket
    raise ValueError(f"{field}: invalid bucket {value!r}; allowed: {ALLOWED_BUCKETS}")


_VALUES = tuple(member.value for member in Bucket)  # (iterating the enum and .value are Python calls)
_P, _O, _I, _W = Bucket.PRODUCTIVE, Bucket.OVERHEAD, Bucket.IDLE, Bucket.WASTED

#: Known RL phase names and their default bucket, by where each name comes from (the frameworks' own
#: timer names, read from their sources; listed in docs/phase-names.md). Lookups normalise a name (see
#: :func:`default_bucket`). Umbrella names (``step``, NeMo-RL's ``total_step_time``) are deliberately absent:
#: a step's own time is its phases'.
# fmt: off
PHASE_SOURCES: Mapping[str, Mapping[str, Bucket]] = MappingProxyType({
    "lens_rl": {
        "generation": _P, "generate": _P, "rollout": _P, "rollouts": _P,
        "reward": _P, "rewards": _P, "reward_computation": _P, "reward_model": _P,
        "policy_training": _P, "train": _P, "training": _P, "train_step": _P, "optimizer_step": _P,
        "value_training": _P, "critic_training": _P, "loss": _P, "forward": _P, "backward": _P,
        "logprob": _P, "logprobs": _P, "policy_logprob": _P, "ref_logprob": _P, "reference_logprob": _P,
        "advantage": _P, "advantages": _P, "advantage_computation": _P,
        "checkpointing": _O, "checkpoint": _O, "save_checkpoint": _O,
        "weight_sync": _O, "refit": _O, "weight_update": _O, "broadcast_weights": _O,
        "data_processing": _O, "data_loading": _O, "dataloader": _O, "tokenization": _O,
        "validation": _O, "evaluation": _O, "eval": _O, "logging": _O, "metrics_logging": _O,
        "offload": _O, "onload": _O, "prepare_for_generation": _O, "prepare_for_training": _O,
        "setup": _O, "cluster_setup": _O, "model_load": _O, "load_model": _O, "init": _O, "launch": _O,
        "wait": _I, "waiting": _I, "idle": _I, "barrier": _I, "queue_wait": _I, "sync_wait": _I,
        "wasted": _W, "discarded": _W, "retry": _W, "failed_rollout": _W,
    },
    # NeMo-RL main of 2026-08-22 (7ea279a; package_info 0.6.0): nemo_rl/algorithms/grpo.py (sync and async
    # GRPO), grpo_sync.py, async_utils/, experience/rollouts.py (timing/rollout/...), models/policy/
    "NeMo-RL": {
        "reward_calculation": _P, "policy_and_reference_logprobs": _P, "advantage_calculation": _P,
        "get_logprobs": _P, "get_reference_policy_logprobs": _P, "get_values": _P, "get_topk_logits": _P,
        "get_full_logits_ipc": _P, "value_inference": _P, "model_forward": _P, "model_forward_multiple": _P,
        "teacher_forward": _P, "teacher_logprob_inference": _P, "_run_rollouts_total": _P,
        "prepare_for_generation/total": _O, "transfer_and_update_weights": _O, "logprob_inference_prep": _O,
        "training_prep": _O, "value_training_prep": _O, "teacher_logprob_inference_prep": _O,
        "dynamic_sampling": _O, "overlong_filter": _O, "mask_sample_filter": _O, "recompute_kv_scales": _O,
        "offload_before_refit": _O, "offload_after_refit": _O, "policy_offload_after_refit": _O,
        "total_validation_time": _O, "validation_total": _O, "load_data": _O, "sharding_data": _O,
        "shard_data": _O, "shard_meta": _O, "use_reference_model": _O, "rollout/prepare_for_metrics_calculation": _O,
        "rollout/aggregate_metrics": _O, "rollout/per_agent_misc_metrics": _O, "rollout/compute_metrics": _O,
        "exposed_generation": _I, "buffer_starvation": _I, "refit_bubble": _I, "refit_event_wait": _I,
        "generation_limit_pause": _I,
    },
    # veRL 0.9.1: every name its trainers pass to marked_timer / simple_timer (verl/trainer/ppo/ray_trainer.py,
    # v1/, experimental/ fully async, one-step-off, separation, agent loop), logged as timing_s/<name>
    "veRL": {
        "gen": _P, "generate_sequences": _P, "generate_async": _P, "old_log_prob": _P, "ref": _P, "values": _P,
        "adv": _P, "update_critic": _P, "update_actor": _P, "tool_calls": _P, "compute_score": _P,
        "update_weights": _O, "sync_rollout_weights": _O, "param_sync": _O, "switch_to_rollout": _O,
        "switch_to_trainer": _O, "testing": _O, "validate_time": _O, "dump_rollout_generations": _O,
        "start_profile": _O, "stop_profile": _O,
        "switch_wait": _I, "wait_for_enough_samples": _I,
    },
    # OpenRLHF 0.11.0: openrlhf/trainer/ppo_trainer.py, ppo_trainer_async.py ("timing/..." keys; the checkpoint
    # step is named by its method, which OpenRLHF does not time)
    "OpenRLHF": {"make_experience": _P, "ppo_train": _P, "broadcast": _O, "save_logs_and_checkpoints": _O},
    # SkyRL 0.3.0: skyrl/train/ (Timer names of the trainers, the fully async trainer's macro-phases, the
    # workers), as in skyrl_train 0.3.1; logged as timing/<name>
    "SkyRL": {
        "fwd_logprobs_values_reward": _P, "apply_reward_kl_penalty": _P,
        "compute_advantages_and_returns": _P, "train_critic_and_policy": _P, "run_training": _P, "policy_train": _P,
        "critic_train": _P, "forward_backward": _P, "optim_step": _P,
        "sync_weights": _O, "sync_weights_to_inference_engines": _O, "init_weight_sync_state": _O,
        "save_checkpoints": _O, "save_hf_model": _O, "load_checkpoints": _O, "cleanup_old_checkpoints": _O,
        "convert_to_training_input": _O, "postprocess_generator_output": _O, "dump_data_batch": _O,
        "dump_eval_results": _O, "log_train_results": _O, "log_eval_results": _O, "update_ref_with_policy": _O,
        "wait_for_generation_buffer": _I,
    },
    # trl/extras/profiling.py blocks of trl/trainer/ (profiling_context names and @profiling_decorator methods,
    # without the trainer class TRL prefixes), and the transformers Trainer phases lens_rl weaves
    "TRL": {
        "compute_loss": _P, "_prepare_inputs": _P, "_calculate_rewards": _P, "training_step": _P,
        "_get_per_token_logps_and_entropies": _P, "_get_per_token_logps": _P, "_get_last_hidden_state": _P,
        "generate_batch": _P, "_generate_on_policy_for_slices": _P, "_generate_student_completions": _P,
        "sync_weights": _O, "_fill_buffer": _O,
    },
})
# fmt: on

#: Every known phase name and its default bucket (the union of :data:`PHASE_SOURCES`).
DEFAULT_PHASE_BUCKETS: Mapping[str, Bucket] = MappingProxyType(
    {name: bucket for names in PHASE_SOURCES.values() for name, bucket in names.items()}
)

_SEP = re.compile(r"[./]")


def normalized(name: str) -> str:
    """A phase name as the table keys it: stripped, lower case, ``-`` and spaces as ``_``, ``.`` as ``/``."""
    return name.strip().lower().replace("-", "_").replace(" ", "_").replace(".", "/")


def default_bucket(name: str) -> Bucket | None:
    """The default bucket for a phase name, else None.

    Tried in order on the normalised name: the whole name; then each shorter suffix of its ``/`` or ``.``
    parts (``timing/train/exposed_generation`` -> ``exposed_generation``), where a part that is a bucket's
    own name says the bucket (NeMo-RL's ``idle/refit_bubble``); then each shorter ``/`` prefix, a timer
    and its sub-timers (``policy_training/submit_training_futures`` -> ``policy_training``).
    """
    if not isinstance(name, str):
        return None
    key = normalized(name)
    parts = key.split("/")
    for i in range(len(parts)):
        suffix = "/".join(parts[i:])
        bucket = DEFAULT_PHASE_BUCKETS.get(suffix)
        if bucket is None and len(parts) - i > 1:
            bucket = _BY_VALUE.get(parts[i])
        if bucket is not None:
            return bucket
    for i in range(len(parts) - 1, 0, -1):
        bucket = DEFAULT_PHASE_BUCKETS.get("/".join(parts[:i]))
        if bucket is not None:
            return bucket
    return None


#: What a phase does with its tokens, for FLOPs per token: training (forward and backward, 6N for N
#: parameters), generation and logprob (forward only, 2N). Names as the default table keys them.
# fmt: off
PHASE_KINDS: Mapping[str, str] = MappingProxyType({
    **dict.fromkeys((
        "policy_training", "train", "training", "train_step", "value_training", "critic_training",
        "update_actor", "update_critic", "ppo_train", "train_critic_and_policy", "run_training", "policy_train",
        "critic_train", "forward_backward",
    ), "training"),
    **dict.fromkeys((
        "generation", "generate", "rollout", "rollouts", "gen", "generate_sequences", "generate_async",
        "_run_rollouts_total", "generate_batch", "_generate_on_policy_for_slices", "_generate_student_completions",
    ), "generation"),
    **dict.fromkeys((
        "logprob", "logprobs", "policy_logprob", "ref_logprob", "reference_logprob", "get_logprobs",
        "get_reference_policy_logprobs", "policy_and_reference_logprobs", "old_log_prob", "ref",
        "fwd_logprobs_values_reward", "_get_per_token_logps_and_entropies", "_get_per_token_logps",
    ), "logprob"),
})
# fmt: on
#: FLOPs per token and parameter by kind.
FLOP_FACTORS: Mapping[str, int] = MappingProxyType({"training": 6, "generation": 2, "logprob": 2})


#: The weight-sync family (lens_rl's names and the frameworks', by their last ``/`` part as the table keys them):
#: what the pipeline's weight-sync ``total`` and ``pause`` are measured on.
WEIGHT_SYNC_PHASES: frozenset[str] = frozenset((
    "weight_sync", "refit", "weight_update", "broadcast_weights",  # lens_rl
    "transfer_and_update_weights",  # NeMo-RL (prepare_for_generation/transfer_and_update_weights)
    "update_weights", "sync_rollout_weights", "param_sync",  # veRL
    "broadcast",  # OpenRLHF
    "sync_weights", "sync_weights_to_inference_engines",  # SkyRL, TRL
))  # fmt: skip


@functools.lru_cache(maxsize=4096)
def is_weight_sync(name: str) -> bool:
    """Whether a phase name is of the weight-sync family (:data:`WEIGHT_SYNC_PHASES`), by its last ``/`` part."""
    return isinstance(name, str) and normalized(name).split("/")[-1] in WEIGHT_SYNC_PHASES


@functools.lru_cache(maxsize=4096)
def kind_of(name: str) -> str | None:
    """A phase name's kind (``training``, ``generation``, ``logprob``), by its last ``/`` part; else None."""
    if not isinstance(name, str):
        return None
    return PHASE_KINDS.get(normalized(name).split("/")[-1])


#: Parts of a training step that carry no tokens of their own (transformers' and TRL's backward, optimizer step,
#: loss): of the training family where pools weigh who works (a trainer's backward is training), not for FLOPs
#: per token nor for the versions a training phase consumed (:func:`kind_of` keeps them kindless).
TRAINING_PARTS: frozenset[str] = frozenset(
    ("backward", "optimizer_step", "optim_step", "compute_loss", "loss", "training_step")
)


def family_of(name: str) -> str | None:
    """A phase's family where pools weigh time: its :func:`kind_of`, and ``training`` for :data:`TRAINING_PARTS`."""
    kind = kind_of(name)
    if kind is None and isinstance(name, str) and normalized(name).split("/")[-1] in TRAINING_PARTS:
        return "training"
    return kind


def closest_phase_name(name: str) -> str | None:
    """The known phase name closest to ``name`` (a did-you-mean for an unbucketed phase), or None: None too for
    a name the table knows as it is (a span recorded without a bucket under a known name, a received or
    third-party one: the name is right, the bucket missing)."""
    import difflib

    key = normalized(name).split("/")[-1]
    if not key or key in DEFAULT_PHASE_BUCKETS:
        return None
    close = difflib.get_close_matches(key, list(DEFAULT_PHASE_BUCKETS), n=1, cutoff=0.6)
    if close:
        return close[0]
    within = [known for known in DEFAULT_PHASE_BUCKETS if len(known) >= 3 and (known in key or key in known)]
    return max(within, key=lambda known: (difflib.SequenceMatcher(None, key, known).ratio(), known)) if within else None


def goodput_of(seconds: Mapping[str, float]) -> float | None:
    """productive / (productive + overhead + idle + wasted): the resource view's goodput (a process's bucket
    seconds with its measured idle add up to its lifetime); None when nothing is bucketed."""
    total = sum([seconds.get(value, 0.0) for value in _VALUES])  # (added in the buckets' order, as always)
    return seconds.get("productive", 0.0) / total if total > 0 else None


def union_length(intervals: Iterable[tuple[Any, Any]], *, ordered: bool = False) -> Any:
    """The length covered by the union of ``(start, end)`` intervals (any one unit).

    ``ordered``: they come sorted already (e.g. a ``heapq.merge`` of sorted streams): read
    as they come, never held in memory at once.
    """
    total: Any = 0  # (an int for int inputs: nanoseconds add exactly, in any order)
    lo: Any = None
    hi: Any = 0
    for start, stop in intervals if ordered else sorted(intervals):
        if lo is None or start > hi:
            if lo is not None:
                total += hi - lo
            lo, hi = start, stop
        elif stop > hi:
            hi = stop
    if lo is not None:
        total += hi - lo
    return total


def exclusive_time(start: Any, end: Any, inner: Iterable[tuple[Any, Any]]) -> Any:
    """The one exclusive-time rule, live and offline: a bucketed span's own time.

    ``inner`` are the intervals of its nearest bucketed descendants; their union,
    clipped to ``[start, end]``, is taken away from its duration (never below zero).
    Concurrent children (threads, async tasks) therefore count once. Any one unit.
    """
    clipped = [(max(a, start), min(b, end)) for a, b in inner if min(b, end) > max(a, start)]
    return max((end - start) - union_length(clipped), 0)


def subtracted(start: int, end: int, holes: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """``[start, end]`` less the union of ``holes`` (clipped to it): what a span covers that its nearest bucketed
    descendants do not, as sorted, disjoint intervals (its exclusive time is their length)."""
    out = []
    at = start
    for a, b in sorted((max(a, start), min(b, end)) for a, b in holes if min(b, end) > max(a, start)):
        if a > at:
            out.append((at, a))
        at = max(at, b)
    if end > at:
        out.append((at, end))
    return out


def claimed(segments: Iterable[tuple[int, int, int, Any]], ranks: int = 4) -> tuple[list[int], dict[Any, float]]:
    """Wall-clock time claimed by rank: ``segments`` are ``(start, end, rank, owner)`` (a span's exclusive
    stretches, its bucket's rank in :class:`Bucket`'s order); each instant some
    segment covers goes once to the lowest rank covering it (productive first), split evenly among that
    rank's owners there. Returns ns per rank (they add up to the segments' union) and each owner's share
    (float ns): concurrent spans of one process (threads, async tasks) are counted once over the wall."""
    events = []
    for start, end, rank, owner in segments:
        if end > start:
            events.append((start, 1, rank, owner))
            events.append((end, -1, rank, owner))
    events.sort(key=lambda event: event[0])
    totals = [0] * ranks
    shares: dict[Any, float] = {}
    active: list[dict[Any, int]] = [{} for _ in range(ranks)]
    at = None
    for t, delta, rank, owner in events:
        if at is not None and t > at:
            for r in range(ranks):
                owners = active[r]
                if owners:
                    totals[r] += t - at
                    each = (t - at) / len(owners)
                    for who in owners:
                        shares[who] = shares.get(who, 0.0) + each
                    break
        at = t
        owners = active[rank]
        count = owners.get(owner, 0) + delta
        if count > 0:
            owners[owner] = count
        else:
            owners.pop(owner, None)
    return totals, shares


# (the staleness rule, its own module of this floor; re-exported: lens_rl.buckets is where both sides find it)
from lens_rl.buckets.staleness_rule import staleness, weighted  # noqa: E402

# (the pipeline's verdict rule, likewise: the live step_metrics() keys and the offline rollup both take it here)
from lens_rl.buckets.verdict_rule import VERDICTS, verdict, verdict_name  # noqa: E402
