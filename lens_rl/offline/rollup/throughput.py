"""How fast the GPUs ran: tokens per second per GPU, end to end per step, and MFU where it can be known.

* **Per phase** (worker group and phase, where spans carry ``rl.num_tokens``): tokens over the seconds its
  spans ran (``tokens_per_s``, per running span), and over those seconds times each process's GPUs
  (``tokens_per_s_per_gpu``; ``rl.num_gpus`` is on every resource).
* **End to end**: a step's tokens (``rl.num_tokens`` on the step span, else the sum over its generation
  phases) over its wall and the job's GPUs (distinct (host, GPU) pairs: a process's ``rl.gpu.uuids``, else its
  ``rl.gpu_ids``, so colocated processes sharing GPUs count them once; else its ``rl.num_gpus``): ``e2e_tokens_per_s_per_gpu``, per step and for the run.
* **MFU** = achieved FLOPs over peak FLOPs. FLOPs per token from a span's ``rl.flops_per_token``, else the
  resource's ``rl.model.num_params`` N: 6N for training phases, 2N for generation and logprob
  (:data:`lens_rl.buckets.PHASE_KINDS`); the peak from the resource's ``rl.device.peak_tflops``, else
  :data:`PEAK_TFLOPS` by ``rl.device.name``. Omitted, never guessed, where either is unknown.

Example::

    peak_tflops("NVIDIA H100 80GB HBM3")     # 989.0 (dense BF16)
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from lens_rl.buckets import FLOP_FACTORS, kind_of

__all__ = ["PEAK_TFLOPS", "job_gpus", "peak_tflops", "phase_rates", "step_tokens", "with_remote_tokens"]

#: Dense BF16 tensor-core peak per GPU, TFLOP/s (no sparsity), from NVIDIA's datasheets (docs/performance.md
#: lists them). Matched on the device name, most specific first.
PEAK_TFLOPS: tuple[tuple[tuple[str, ...], float], ...] = (
    (("b200",), 2250.0),
    (("h200",), 989.0),
    (("h100", "pcie"), 756.0),
    (("h100", "nvl"), 835.0),
    (("h100",), 989.0),
    (("a100",), 312.0),
)


def peak_tflops(device: Mapping[str, Any] | str | None) -> float | None:
    """A device's dense BF16 peak: ``rl.device.peak_tflops`` as given, else the table by ``rl.device.name``."""
    if isinstance(device, Mapping):
        given = device.get("rl.device.peak_tflops")
        if isinstance(given, (int, float)) and not isinstance(given, bool) and given > 0:
            return float(given)
        device = device.get("rl.device.name")
    if not isinstance(device, str):
        return None
    name = device.lower()
    for words, peak in PEAK_TFLOPS:
        if all(word in name for word in words):
            return peak
    return None


def _gpus(device: Mapping[str, Any]) -> int:
    count = device.get("rl.num_gpus")
    return count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 0


def job_gpus(processes: Sequence[Any]) -> int:
    """The job's GPUs: distinct (host, GPU) pairs, a process's GPUs its devices (``rl.gpu.uuids``, resolved
    through NVML: ``CUDA_VISIBLE_DEVICES=0,7,1`` on a 2-GPU host is one, GPU 0 named by index and by UUID is
    one) where it names them, else its raw ids (``rl.gpu_ids``); plus the counts (``rl.num_gpus``) of the
    processes of the latest attempt that name neither."""
    latest = max((p.key.attempt for p in processes), default=0)
    pairs: set[tuple[Any, str]] = set()
    counted = 0
    for part in processes:
        device = part.device
        uuids = part.gpu[0] if part.gpu is not None else ()  # (its rl.gpu.uuids: lens_rl.offline.read.gpu_spans)
        ids = device.get("rl.gpu_ids")
        if uuids:
            pairs.update((device.get("host.name"), uuid) for uuid in uuids)
        elif isinstance(ids, str) and ids:
            pairs.update((device.get("host.name"), gpu) for gpu in ids.split(","))
        elif part.key.attempt == latest:
            counted += _gpus(device)
    return len(pairs) + counted


def phase_rates(name: str, members: Sequence[tuple[Any, Any]]) -> tuple[float | None, float | None]:
    """``(tokens_per_s_per_gpu, mfu)`` of phase ``name`` in one group, from its (process part, phase part)
    members; each None when it cannot be known. Per GPU counts the tokens of the processes whose GPUs are
    known: a member with no ``rl.num_gpus`` adds neither tokens nor GPU-seconds (its tokens over none of its
    GPUs would raise the others' rate)."""
    factor = FLOP_FACTORS.get(kind_of(name) or "")
    tokens = gpu_s = flops = capacity = 0.0
    for part, phase in members:
        if phase.tokens <= 0 or phase.token_ns <= 0:
            continue
        gpus = _gpus(part.device)
        if not gpus:
            continue
        seconds = phase.token_ns / 1e9
        tokens += phase.tokens
        gpu_s += seconds * gpus
        achieved = _flops(part.device, phase, factor)
        peak = peak_tflops(part.device)
        if achieved is not None and peak is not None:
            flops += achieved
            capacity += seconds * gpus * peak * 1e12
    per_gpu = tokens / gpu_s if gpu_s > 0 else None
    return per_gpu, (flops / capacity if capacity > 0 else None)


def _flops(device: Mapping[str, Any], phase: Any, factor: int | None) -> float | None:
    """FLOPs of a phase's tokens: those its spans said per token, the rest ``factor`` x N (None when unknown)."""
    rest = phase.tokens - phase.flops_tokens
    if rest <= 0:
        return phase.flops if phase.flops_tokens > 0 else None
    params = device.get("rl.model.num_params")
    if not isinstance(params, (int, float)) or isinstance(params, bool) or params <= 0 or factor is None:
        return None
    return phase.flops + rest * factor * float(params)


def step_tokens(processes: Sequence[Any]) -> dict[Any, float]:
    """step -> its tokens: the step span's own ``rl.num_tokens`` where set, else its generation phases' sum."""
    own: dict[Any, float] = {}
    gen: dict[Any, float] = {}
    for part in processes:
        for (source, step), count in part.step_tokens.items():
            target = own if source == "own" else gen
            target[step] = target.get(step, 0) + count
    return {step: own.get(step, gen.get(step, 0.0)) for step in own.keys() | gen.keys()}


def with_remote_tokens(processes: Sequence[Any]) -> list[Any]:
    """The parts with the token counts of third-party requests (vLLM's ``llm_request`` in a vLLM process's
    file, its ``gen_ai.usage`` counts) given to the generation phase span in another file that each hangs
    from, directly or through third-party spans of that file (an HTTP client's call: the part's ``relays``),
    where that span has no ``rl.num_tokens`` of its own: its phase's tokens and token time (in its step's
    too, for ``--steps``), and its step's generation tokens. The parts given are left as they are (a part that gains is a copy)."""
    relays: dict[str, str] = {}
    for part in processes:
        relays.update(part.relays)
    remote: dict[str, list[float]] = {}
    for part in processes:
        for key, (out, into) in part.remote_tokens.items():
            found = remote.setdefault(relays.get(key, key), [0.0, 0.0])
            found[0] += out
            found[1] += into
    if not remote:
        return list(processes)
    out_parts = []
    for part in processes:
        matched = [(remote[key], span) for key, span in part.untokened.items() if key in remote]
        if not matched:
            out_parts.append(part)
            continue
        part = copy.copy(part)
        part.phases, part.step_tokens = dict(part.phases), dict(part.step_tokens)
        part.phase_steps = dict(part.phase_steps)
        for (out, into), (name, bucket, ns, step) in matched:
            count = out or into
            phase = part.phases[(name, bucket)] = dataclasses.replace(part.phases[(name, bucket)])
            phase.tokens += count
            phase.token_ns += ns
            if step is not None:
                part.step_tokens[("gen", step)] = part.step_tokens.get(("gen", step), 0) + count
            table = part.phase_steps.get((name, bucket))
            if table is not None and type(step) is int:  # (its phase per step likewise: what --steps cuts)
                part.phase_steps[(name, bucket)] = table.with_tokens(step, count, ns)
        out_parts.append(part)
    return out_parts
