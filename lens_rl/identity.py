"""Who is exporting: the resource attributes of the SPEC's identity table.

Master-config values become attributes only through :data:`MASTER_CONFIG_PATHS`, an
allow-list of lookup paths, so a config full of API keys leaks nothing. Layering,
lowest first: detected (``host.name``, ``process.pid``) < ``OTEL_RESOURCE_ATTRIBUTES``
< the driver's ``LENS_RL_OTEL_RESOURCE_ATTRIBUTES`` < rank / group from the
environment < explicit arguments.

Example::

    attrs = job_identity({"policy": {"model_name": "Qwen/Qwen2.5-1.5B"}}, "grpo", "r1")
    assert attrs["nv.dl.campaign.stage"] == "RL"
"""

from __future__ import annotations

import math
import os
import socket
import sys
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, unquote

from lens_rl._attributes import clean_attributes
from lens_rl._errors import internal_error
from lens_rl.config import ATTEMPT_ENV, CAMPAIGN_STAGE_ENV, LAUNCH_TIME_ENV, RESOURCE_ATTRIBUTES_ENV, TelemetryConfig

__all__ = [
    "ATTEMPT",
    "MASTER_CONFIG_PATHS",
    "RESTART_COUNT_ENV",
    "attempt_from_env",
    "check_ints",
    "DriverIdentity",
    "device_name",
    "for_driver",
    "gpus",
    "lookup",
    "campaign_stage",
    "decode_attributes",
    "encode_attributes",
    "job_identity",
    "launch_time_ns",
    "resolve_attempt",
    "worker_attributes",
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
DEVICE_NAME = "rl.device.name"
#: What schedulers count restarts in, tried in order after the user's value and the store.
RESTART_COUNT_ENV = ("SLURM_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT")
#: A launch time further back than this is not this attempt's (a stale variable): no launch span.
LAUNCH_MAX_AGE_S = 7 * 24 * 3600

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
    {RANK, WORLD_SIZE, ATTEMPT, NUM_GPUS}
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


def campaign_stage(algorithm: str | None, environ: Mapping[str, str] | None = None) -> str:
    """``sft`` -> ``SFT``, ``rm`` -> ``RM``, anything else -> ``RL``; env override wins."""
    env = os.environ if environ is None else environ
    override = env.get(CAMPAIGN_STAGE_ENV, "").strip()
    if override:
        return override
    algo = (algorithm or "").strip().lower()
    return {"sft": "SFT", "rm": "RM"}.get(algo, "RL")


#: Algorithm blocks a master config may carry, in the order they are looked for.
ALGORITHM_BLOCKS = ("grpo", "ppo", "dpo", "sft", "rm", "distillation", "reinforce", "rloo", "dapo", "kto", "orpo")


def infer_algorithm(master_config: object) -> str | None:
    """The algorithm named by the master config's algorithm block (``grpo:``, ``ppo:`` ...), else None."""
    for name in ALGORITHM_BLOCKS:
        if lookup(master_config, name) is not None:
            return name
    return None


def job_identity(master_config: object, algorithm: str | None, run_id: str) -> dict[str, Any]:
    """The job-wide attributes the driver hands to every worker."""
    algorithm = (algorithm or "").strip() or infer_algorithm(master_config) or "unknown"
    attrs: dict[str, Any] = {
        RUN_ID: run_id,
        ALGORITHM: algorithm,
        CAMPAIGN_STAGE: campaign_stage(algorithm),
    }
    for key, paths in MASTER_CONFIG_PATHS.items():
        for path in paths:
            value = lookup(master_config, path)
            if isinstance(value, (str, int, float)) and not isinstance(value, bool) and value != "":
                attrs[key] = value
                break
    return clean_attributes(attrs)


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


def _int_from(value: object, field: str, problems: list[str]) -> int | None:
    """``value`` as an int (None when absent); a value that is no integer is a problem, named, and None."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        problems.append(f"{field}={value!r} is not an integer")
        return None
    try:
        return int(str(value).strip()) if not isinstance(value, float) else int(value)
    except ValueError:
        problems.append(f"{field}={value!r} is not an integer")
        return None


def _attempt_value(text: object) -> int | None:
    """An attempt as written in the environment: an int in [0, 2^31), else None."""
    try:
        value = int(str(text).strip())
    except (TypeError, ValueError):
        return None
    return value if 0 <= value < INT_LIMIT else None


def attempt_from_env(env: Mapping[str, str]) -> int | None:
    """``LENS_RL_OTEL_ATTEMPT`` as the user (or the driver) set it; None when unset. A value that is no
    integer in [0, 2^31) raises ``ValueError`` naming it (a worker turns that into one warning)."""
    text = env.get(ATTEMPT_ENV)
    if text is None or not text.strip():
        return None
    value = _attempt_value(text)
    if value is None:
        raise ValueError(
            f"{ATTEMPT_ENV}={text!r} is not valid: expected an integer in [0, 2^31) (0 for the first attempt)"
        )
    return value


def resolve_attempt(config: TelemetryConfig, env: Mapping[str, str]) -> tuple[int, int | None]:
    """The driver's attempt, resolved once (the SPEC's order): ``LENS_RL_OTEL_ATTEMPT`` as set; else, with
    the file store, one more than the highest attempt of the driver files already in
    ``trace_dir/<run_id>/``; else ``SLURM_RESTART_COUNT`` / ``TORCHELASTIC_RESTART_COUNT``; else 0. And,
    with the file store, when the run's files were last written (ns; None for a new run)."""
    earlier: set[int] = set()
    last_write: int | None = None
    if config.exporter == "file":
        from lens_rl.store import driver_attempts, safe_part

        earlier, last_write = driver_attempts(os.path.join(config.trace_dir, safe_part(config.run_id, "run")))
    given = attempt_from_env(env)
    if given is not None:
        return given, last_write
    if earlier:
        return max(earlier) + 1, last_write
    for name in RESTART_COUNT_ENV:
        value = _attempt_value(env.get(name))
        if value is not None:
            return value, last_write
    return 0, last_write


def launch_time_ns(env: Mapping[str, str], now_ns: int, after_ns: int | None = None) -> tuple[int, str] | None:
    """When this attempt was launched, and the variable that says so: ``LENS_RL_OTEL_LAUNCH_TIME`` (epoch
    seconds, a launcher's; a value that is no number raises ``ValueError`` naming it), else
    ``SLURM_JOB_START_TIME``; only when it is earlier than ``now_ns`` by less than 7 days, and not before
    ``after_ns`` (the run's last write: a time before it is an earlier attempt's, left in the environment)."""
    for name in (LAUNCH_TIME_ENV, "SLURM_JOB_START_TIME"):
        text = env.get(name)
        if text is None or not text.strip():
            continue
        try:
            seconds = float(text.strip())
        except ValueError:
            if name == LAUNCH_TIME_ENV:
                raise ValueError(
                    f"{LAUNCH_TIME_ENV}={text!r} is not valid: expected epoch seconds (e.g. $(date +%s.%N))"
                ) from None
            continue
        if not math.isfinite(seconds):
            continue
        launched = int(seconds * 1e9)
        if 0 < now_ns - launched < LAUNCH_MAX_AGE_S * 1e9 and (after_ns is None or launched >= after_ns):
            return launched, name
    return None


def gpus(env: Mapping[str, str]) -> tuple[int, str | None]:
    """This process's GPUs: the devices ``CUDA_VISIBLE_DEVICES`` lists (set and empty: none), else Ray's GPU
    ids when this is a Ray worker, else none; and their ids, comma-separated, when known (what tells two
    processes sharing a GPU apart from two GPUs). Ray is never imported here."""
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = [d.strip() for d in visible.split(",") if d.strip() and not d.strip().startswith("-")]
        if ids and all(d.isdigit() or d.startswith(("GPU-", "MIG-")) for d in ids):
            return len(ids), ",".join(ids)
        return 0, None
    ray = sys.modules.get("ray")
    try:
        if ray is not None and ray.is_initialized():
            ids = [str(d) for d in ray.get_gpu_ids()]
            return len(ids), ",".join(ids) or None
    except Exception as exc:  # a Ray without a worker context: nothing to learn
        internal_error(exc, "ray-gpu-ids")
    return 0, None


def device_name() -> str | None:
    """The first visible GPU's name, best effort: from torch when the job already imported it (lens_rl never
    imports it), else None."""
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_available():
            return str(torch.cuda.get_device_name(0))
    except Exception as exc:
        internal_error(exc, "device-name")
    return None


def _detected(env: Mapping[str, str]) -> dict[str, Any]:
    """What the process detects (host, pid, its GPUs and their kind), under ``OTEL_RESOURCE_ATTRIBUTES``."""
    attrs: dict[str, Any] = {"host.name": socket.gethostname(), "process.pid": os.getpid()}
    count, ids = gpus(env)
    attrs[NUM_GPUS] = count
    if ids is not None:
        attrs[GPU_IDS] = ids
    if count:
        name = device_name()
        if name is not None:
            attrs[DEVICE_NAME] = name
    attrs.update(decode_attributes(env.get("OTEL_RESOURCE_ATTRIBUTES")))
    return attrs


def worker_attributes(
    *,
    service_name: str,
    rank: int | None,
    world_size: int | None,
    worker_group: str | None,
    explicit: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    problems: list[str] | None = None,
) -> tuple[dict[str, Any], bool]:
    """A process's resource attributes and whether a rank was found.

    ``rank``/``world_size`` default to ``RANK``/``WORLD_SIZE``, ``worker_group`` to
    ``LENS_RL_WORKER_GROUP``, else ``worker``. What is odd about them (a rank that is no integer, below 0
    or not below the world size; a world size below 1) is appended to ``problems``, one line each; an
    integer is kept as given, anything else reads as absent.
    """
    env = os.environ if environ is None else environ
    problems = [] if problems is None else problems
    attrs = _detected(env)
    attrs.update(decode_attributes(env.get(RESOURCE_ATTRIBUTES_ENV)))
    rank_value = _int_from(rank, "rank", problems) if rank is not None else _int_from(env.get("RANK"), "RANK", problems)
    size_value = (
        _int_from(world_size, "world_size", problems)
        if world_size is not None
        else _int_from(env.get("WORLD_SIZE"), "WORLD_SIZE", problems)
    )
    if size_value is not None and size_value < 1:
        problems.append(f"world_size={size_value} is below 1")
    if rank_value is not None and rank_value < 0:
        problems.append(f"rank={rank_value} is below 0")
    elif rank_value is not None and size_value is not None and size_value >= 1 and rank_value >= size_value:
        problems.append(f"rank={rank_value} is not below world_size={size_value}")
    group = worker_group or env.get("LENS_RL_WORKER_GROUP", "").strip() or attrs.get(WORKER_GROUP) or "worker"
    attempt = attempt_from_env(env)  # (raises on a bad value: the worker's boundary makes it one warning)
    if attempt is None:
        attempt = next((a for a in map(_attempt_value, map(env.get, RESTART_COUNT_ENV)) if a is not None), None)
    attrs[ATTEMPT] = attempt if attempt is not None else _attempt_value(attrs.get(ATTEMPT)) or 0
    attrs[RANK] = rank_value if rank_value is not None else attrs.get(RANK, 0)
    attrs[WORLD_SIZE] = size_value if size_value is not None else attrs.get(WORLD_SIZE, 1)
    attrs[WORKER_GROUP] = group
    attrs["service.name"] = service_name
    attrs.update(clean_attributes(explicit))
    check_ints(attrs)  # (raises: the worker's boundary makes it one warning)
    return attrs, rank_value is not None


class DriverIdentity:
    """The driver's identity, computed once: its resource attributes, and the environment it hands to
    workers (``projection``; the names in ``overwrite`` replace a value already set, the others are
    ``setdefault``: a variable the user set wins), and when the attempt was launched (``launch``: ns and the
    variable that said so, or None)."""

    __slots__ = ("config", "resource", "projection", "overwrite", "launch")

    def __init__(
        self,
        config: TelemetryConfig,
        resource: dict[str, Any],
        projection: dict[str, str],
        overwrite: frozenset[str],
        launch: tuple[int, str] | None = None,
    ) -> None:
        self.config = config
        self.resource = resource
        self.projection = projection
        self.overwrite = overwrite
        self.launch = launch


def for_driver(
    master_config: object, algorithm: str | None, config: TelemetryConfig, environ: Mapping[str, str] | None = None
) -> DriverIdentity:
    """The driver's resource and the workers' environment, from the master config, ``algorithm`` and the
    resolved ``config`` (its run id filled). Nothing is written: lifecycle writes the projection once, at
    the end of a successful start. Values keep their types (a float stays a float)."""
    env = os.environ if environ is None else environ
    algorithm = (algorithm or "").strip() or infer_algorithm(master_config)
    run_id = str(config.run_id)
    stage = env.get(CAMPAIGN_STAGE_ENV, "").strip() or campaign_stage(algorithm, {})
    job = job_identity(master_config, algorithm, run_id)
    job["nv.dl.campaign.stage"] = stage
    job.update(decode_attributes(env.get(RESOURCE_ATTRIBUTES_ENV)))  # what the user set wins
    attempt, last_write = resolve_attempt(config, env)
    job[ATTEMPT] = attempt
    launch = launch_time_ns(env, time.time_ns(), last_write)
    resource = _detected(env)
    resource.update(job)
    resource.update({RANK: 0, WORLD_SIZE: 1, WORKER_GROUP: "driver", "service.name": config.service_name})
    check_ints(resource)
    projection = dict(config.to_env())
    projection[CAMPAIGN_STAGE_ENV] = stage
    projection[RESOURCE_ATTRIBUTES_ENV] = encode_attributes(job)
    projection[ATTEMPT_ENV] = str(attempt)
    return DriverIdentity(config, resource, projection, frozenset({RESOURCE_ATTRIBUTES_ENV}), launch)


def lookup(master_config: object, path: str) -> Any:
    """Best-effort ``a.b.c`` lookup through dicts, attribute objects and models; None when missing."""
    node: Any = master_config
    for part in path.split("."):
        if node is None:
            return None
        if isinstance(node, Mapping):
            node = node.get(part)
        else:
            try:
                node = getattr(node, part, None)
            except Exception as exc:  # a hostile __getattr__ must not break identity
                internal_error(exc, "config-lookup")
                return None
    return node
