"""The identity table's attribute names, the master-config paths allowed to become attributes, the range every
integer of an identity lies in, and how attributes are written into an environment variable."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, unquote

__all__ = [
    "ALGORITHM",
    "ATTEMPT",
    "CAMPAIGN_STAGE",
    "DEVICE_NAME",
    "GPU_IDS",
    "GPU_UUIDS",
    "INT_LIMIT",
    "MASTER_CONFIG_PATHS",
    "NUM_GPUS",
    "RANK",
    "RUN_ID",
    "WORKER_GROUP",
    "WORLD_SIZE",
    "check_ints",
    "decode_attributes",
    "encode_attributes",
]

RANK = "nv.dl.rank"
WORLD_SIZE = "nv.dl.world_size"
WORKER_GROUP = "rl.worker_group"
CAMPAIGN_STAGE = "nv.dl.campaign.stage"
RUN_ID = "rl.run_id"
ALGORITHM = "rl.algorithm"
ATTEMPT = "rl.attempt"
NUM_GPUS = "rl.num_gpus"
GPU_IDS = "rl.gpu_ids"
#: The UUIDs of the process's GPUs (a list of strings): what its GPU samples are joined by.
GPU_UUIDS = "rl.gpu.uuids"
DEVICE_NAME = "rl.device.name"

#: attribute -> master-config paths tried in order (first present wins). Nothing
#: else from the master config ever becomes an attribute.
MASTER_CONFIG_PATHS: dict[str, tuple[str, ...]] = {
    "rl.model.name": ("policy.model_name",),
    "rl.precision": ("policy.precision",),
    "rl.parallel.tensor": (
        "policy.dtensor_cfg.tensor_parallel_size",
        "policy.megatron_cfg.tensor_model_parallel_size",
        "policy.tensor_parallel_size",
    ),
    "rl.parallel.pipeline": (
        "policy.megatron_cfg.pipeline_model_parallel_size",
        "policy.pipeline_parallel_size",
    ),
    "rl.parallel.context": (
        "policy.dtensor_cfg.context_parallel_size",
        "policy.megatron_cfg.context_parallel_size",
        "policy.context_parallel_size",
    ),
    "rl.parallel.generation_tensor": ("policy.generation.vllm_cfg.tensor_parallel_size",),
    "rl.cluster.num_nodes": ("cluster.num_nodes",),
    "rl.cluster.gpus_per_node": ("cluster.gpus_per_node",),
}

_INT_KEYS = frozenset(
    {RANK, WORLD_SIZE, ATTEMPT, NUM_GPUS, "rl.max_staleness"}
    | {k for k in MASTER_CONFIG_PATHS if k.startswith(("rl.parallel.", "rl.cluster."))}
)
#: Every integer of a process's identity lies in [-INT_LIMIT, INT_LIMIT) (an attempt in [0, INT_LIMIT)): what
#: any reader of a store header holds (a 64-bit column, a C int), whatever the environment said.
INT_LIMIT = 2**31


def check_ints(attrs: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` naming an integer attribute of ``attrs`` (rank, world size, attempt, GPU
    count, parallel and cluster sizes) outside [-2^31, 2^31): no header may carry a value a reader cannot
    hold. The driver raises it; a worker turns it into one warning and runs off."""
    for key in _INT_KEYS:
        value = attrs.get(key)
        if isinstance(value, int) and not -INT_LIMIT <= value < INT_LIMIT:
            raise ValueError(f"{key}={value!r} is out of range: expected an integer in [-2^31, 2^31)")


def encode_attributes(attrs: Mapping[str, Any]) -> str:
    """``key=value,...`` with percent-encoding, as ``OTEL_RESOURCE_ATTRIBUTES`` is written."""
    return ",".join(f"{quote(str(k), safe='.-_')}={quote(str(v), safe='')}" for k, v in attrs.items())


def decode_attributes(text: str | None) -> dict[str, Any]:
    """Parse :func:`encode_attributes` output; malformed pairs are skipped, never raised on."""
    out: dict[str, Any] = {}
    for pair in (text or "").split(","):
        key, sep, value = pair.partition("=")
        key = unquote(key.strip())
        if not sep or not key:
            continue
        value = unquote(value.strip())
        if key in _INT_KEYS:
            try:
                out[key] = int(value)
                continue
            except ValueError:
                pass
        out[key] = value
    return out
