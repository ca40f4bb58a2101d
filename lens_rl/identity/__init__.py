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

import os
import socket
import time
from collections.abc import Mapping
from typing import Any

from lens_rl._attributes import clean_attributes, clean_value
from lens_rl._errors import internal_error
from lens_rl.config import ATTEMPT_ENV, CAMPAIGN_STAGE_ENV, RESOURCE_ATTRIBUTES_ENV, TelemetryConfig, users_environ
from lens_rl.identity.attempt import RESTART_COUNT_ENV, attempt_from_env, attempt_value, launch_time_ns, resolve_attempt
from lens_rl.identity.attributes import (
    ALGORITHM,
    ATTEMPT,
    CAMPAIGN_STAGE,
    DEVICE_NAME,
    GPU_IDS,
    GPU_UUIDS,
    MASTER_CONFIG_PATHS,
    NUM_GPUS,
    RANK,
    RUN_ID,
    WORKER_GROUP,
    WORLD_SIZE,
    check_ints,
    decode_attributes,
    encode_attributes,
)
from lens_rl.identity.device import device_name, gpu_uuids, gpus

# (the attribute names, the attempt and the GPUs are read in identity.attributes, identity.attempt and
# identity.device; what __all__ names stays importable from here)

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


def _detected(env: Mapping[str, str]) -> dict[str, Any]:
    """What the process detects (host, pid, its GPUs and their kind), under ``OTEL_RESOURCE_ATTRIBUTES``."""
    attrs: dict[str, Any] = {"host.name": socket.gethostname(), "process.pid": os.getpid()}
    count, ids = gpus(env)
    attrs[NUM_GPUS] = count
    name = None
    if ids is not None:
        attrs[GPU_IDS] = ids
        uuids, name = gpu_uuids(ids)
        if uuids is not None:  # (NVML said which: as many GPUs as it found, CUDA seeing no more)
            attrs[NUM_GPUS] = count = len(uuids)
        if uuids:
            attrs[GPU_UUIDS] = uuids
    if count:
        name = name or device_name()
        if name is not None:
            attrs[DEVICE_NAME] = name
    attrs.update(decode_attributes(users_environ(env).get("OTEL_RESOURCE_ATTRIBUTES")))  # (not what lens_rl gave vLLM)
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
    integer is kept as given, anything else reads as absent. The identity a reader checks has its declared
    types whoever gave it (:func:`_typed`): a group given as a number (a launcher's id) is its text.
    """
    env = os.environ if environ is None else environ
    problems = [] if problems is None else problems
    attrs = _detected(env)
    attrs.update(decode_attributes(env.get(RESOURCE_ATTRIBUTES_ENV)))
    rank_value, size_value = _rank_and_size(rank, world_size, env, problems)
    group = _name(worker_group) or env.get("LENS_RL_WORKER_GROUP", "").strip() or attrs.get(WORKER_GROUP) or "worker"
    attrs[ATTEMPT] = _worker_attempt(env, attrs.get(ATTEMPT))
    attrs[RANK] = rank_value if rank_value is not None else attrs.get(RANK, 0)
    attrs[WORLD_SIZE] = size_value if size_value is not None else attrs.get(WORLD_SIZE, 1)
    attrs[WORKER_GROUP] = group
    attrs["service.name"] = service_name
    attrs.update(clean_attributes(explicit))
    _typed(attrs, problems)
    check_ints(attrs)  # (raises: the worker's boundary makes it one warning)
    return attrs, rank_value is not None


def _name(value: object) -> str | None:
    """A name given as another type (a group's number from a launcher, an enum) as its text, bounded as
    every attribute value is; None when none is given."""
    if value is None or isinstance(value, str):
        return value
    cleaned = clean_value(value)
    return None if cleaned is None else cleaned if isinstance(cleaned, str) else str(cleaned)


def _typed(attrs: dict[str, Any], problems: list[str]) -> None:
    """The identity a reader checks (group, host, rank, attempt) in its declared types, in place, so no header
    or heartbeat carries a value a reader cannot hold: a group or host given as another type is its text; a
    rank or attempt that is no integer is a problem, named, and 0."""
    for key in (WORKER_GROUP, "host.name"):
        if key in attrs and not isinstance(attrs[key], str):
            attrs[key] = _name(attrs[key]) or ("worker" if key == WORKER_GROUP else "")
    for key in (RANK, ATTEMPT):
        value = attrs.get(key)
        if value is not None and type(value) is not int:
            attrs[key] = _int_from(value, key, problems) or 0


def _rank_and_size(
    rank: int | None, world_size: int | None, env: Mapping[str, str], problems: list[str]
) -> tuple[int | None, int | None]:
    """A worker's rank and world size, as given, else from ``RANK`` / ``WORLD_SIZE`` (None: absent or no
    integer); what is odd about them is appended to ``problems``."""
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
    return rank_value, size_value


def _worker_attempt(env: Mapping[str, str], resource_attempt: Any) -> int:
    """A worker's attempt: ``LENS_RL_OTEL_ATTEMPT`` (raises on a bad value: the worker's boundary makes it one
    warning), else a scheduler's restart count, else the driver's resource's, else 0."""
    attempt = attempt_from_env(env)
    if attempt is None:
        attempt = next((a for a in map(attempt_value, map(env.get, RESTART_COUNT_ENV)) if a is not None), None)
    return attempt if attempt is not None else attempt_value(resource_attempt) or 0


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
