"""`TelemetryConfig`: the ``telemetry:`` block of a job's master config.

Each field is declared once, on :class:`TelemetryConfig` (type, default, env var,
fallback variables, parser); the env table, the known-variable list and the env
projection are derived from those declarations. One resolution rule for every field,
one boolean parser for the whole package, and one validator that names the field, the
value given and what is allowed.

Precedence, highest first: a ``LENS_RL_OTEL_*`` variable already set in the
environment > the YAML value > the standard ``OTEL_*`` fallback > the default.
``OTEL_SDK_DISABLED=true`` forces telemetry off.

Example::

    cfg = TelemetryConfig.from_master_config({"telemetry": {"enabled": True}})
    assert cfg.exporter == "file"
    env = cfg.to_env()          # what the driver hands to workers
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import secrets
from collections.abc import Callable, Mapping
from typing import Any

from lens_rl._errors import internal_error
from lens_rl.config.profile import ProfileSpec, as_profile, profile_to_env
from lens_rl.config.values import (
    Parser,
    as_endpoint,
    as_path,
    as_positive_float,
    as_rate,
    as_sample_hz,
    as_str,
    choice,
    env_text,
    mask_url,
    name_list,
    non_negative_int,
    parse_bool,
    parse_headers,
    positive_int,
    strip_userinfo,
)

__all__ = [
    "ENV",
    "FALLBACK_ENV",
    "PARAMS",
    "VLLM_ENV",
    "Param",
    "TelemetryConfig",
    "mask_url",
    "parse_bool",
    "parse_headers",
    "strip_userinfo",
    "users_environ",
]

EXPORTERS = ("file", "otlp", "console", "none")
PROTOCOLS = ("http/protobuf", "grpc")
#: What the field ``instrument`` may name (``lens_rl.frameworks`` weaves each; a test keeps the two in step).
FRAMEWORKS = ("trl", "transformers", "verl", "nemo_rl", "skyrl", "openrlhf")


@dataclasses.dataclass(frozen=True)
class Param:
    """How one field of :class:`TelemetryConfig` is read and handed on (its type and default are the field's).

    ``env`` is the ``LENS_RL_OTEL_*`` variable that carries it; ``fallback`` the standard
    OpenTelemetry variables used, in order, when neither that variable nor the YAML sets it;
    ``parse(value, where)`` validates a YAML or env value; ``to_env`` writes a value for a worker.
    """

    env: str
    parse: Parser
    fallback: tuple[str, ...] = ()
    to_env: Callable[[Any], str] = env_text


def param(
    default: Any, env: str, parse: Parser, *, fallback: tuple[str, ...] = (), to_env: Callable[[Any], str] = env_text
) -> Any:
    """Declare a config field: its default, env var, parser and fallbacks (the annotation is its type)."""
    return dataclasses.field(default=default, metadata={"param": Param(env, parse, fallback, to_env)})


@dataclasses.dataclass(frozen=True)
class TelemetryConfig:
    """The resolved, validated telemetry settings of one process.

    Each field is declared once, here: its type, default, env var, fallback and parser.
    The first thirteen are the SPEC's table; the rest are its extensions. ``endpoint`` is
    ``None`` when unset; :attr:`resolved_endpoint` applies the default. To add a field,
    add one line here and one row to the README's configuration table (a test holds them).
    """

    enabled: bool = param(False, "LENS_RL_OTEL_ENABLED", parse_bool)
    service_name: str = param("lens-rl", "LENS_RL_OTEL_SERVICE_NAME", as_str, fallback=("OTEL_SERVICE_NAME",))
    exporter: str = param("file", "LENS_RL_OTEL_EXPORTER", choice(EXPORTERS))
    endpoint: str | None = param(
        None, "LENS_RL_OTEL_ENDPOINT", as_endpoint, fallback=("OTEL_EXPORTER_OTLP_ENDPOINT",), to_env=strip_userinfo
    )
    protocol: str = param(
        "http/protobuf", "LENS_RL_OTEL_PROTOCOL", choice(PROTOCOLS), fallback=("OTEL_EXPORTER_OTLP_PROTOCOL",)
    )
    trace_dir: str = param("lens_traces", "LENS_RL_OTEL_TRACE_DIR", as_str)
    traces_enabled: bool = param(True, "LENS_RL_OTEL_TRACES_ENABLED", parse_bool)
    metrics_enabled: bool = param(True, "LENS_RL_OTEL_METRICS_ENABLED", parse_bool)
    metrics_interval_ms: int = param(10000, "LENS_RL_OTEL_METRICS_INTERVAL_MS", positive_int(86_400_000, "ms (1 day)"))
    sample_rate: float = param(1.0, "LENS_RL_OTEL_SAMPLE_RATE", as_rate)
    export_timeout_ms: int = param(10000, "LENS_RL_OTEL_EXPORT_TIMEOUT_MS", positive_int(3_600_000, "ms (1 hour)"))
    vllm_native_tracing: bool = param(False, "LENS_RL_OTEL_VLLM_NATIVE_TRACING", parse_bool)
    #: None until :meth:`with_run_id` fills it (``SLURM_JOB_ID``, else a short random hex).
    run_id: str | None = param(None, "LENS_RL_OTEL_RUN_ID", as_str)
    #: The span queue's bound: the memory cap during a collector outage.
    max_queue_spans: int = param(32768, "LENS_RL_OTEL_MAX_QUEUE_SPANS", positive_int(100_000_000, "spans"))
    max_queue_bytes: int = param(64 << 20, "LENS_RL_OTEL_MAX_QUEUE_BYTES", positive_int(1 << 40, "bytes (1 TiB)"))
    #: Flush at the end of every step umbrella span.
    flush_on_step: bool = param(False, "LENS_RL_OTEL_FLUSH_ON_STEP", parse_bool)
    headers_file: str | None = param(None, "LENS_RL_OTEL_HEADERS_FILE", as_path)
    heartbeat_interval_ms: int = param(
        10000, "LENS_RL_OTEL_HEARTBEAT_INTERVAL_MS", non_negative_int(86_400_000, "ms (1 day)")
    )
    hang_timeout_s: float = param(600.0, "LENS_RL_OTEL_HANG_TIMEOUT_S", as_positive_float)
    #: Frameworks woven at every init (``lens_rl.instrument``): ``trl``, ``verl``, ... or ``all``; none by default.
    instrument: tuple[str, ...] = param((), "LENS_RL_OTEL_INSTRUMENT", name_list(FRAMEWORKS))
    #: GPU samples per second (one sampler per host and run; NVML through pynvml); 0 turns it off, at most 10.
    gpu_sample_hz: float = param(2.0, "LENS_RL_OTEL_GPU_SAMPLE_HZ", as_sample_hz)
    #: ``status`` marks a process ``GPU IDLE`` once its GPUs read 0 % this long while a phase is open.
    gpu_idle_alert_s: float = param(300.0, "LENS_RL_OTEL_GPU_IDLE_ALERT_S", as_positive_float)
    #: Profiler windows (``lens_rl.devices.profile``): steps, groups, ranks, backend, caps; unset: on request only.
    profile: ProfileSpec | None = param(None, "LENS_RL_OTEL_PROFILE", as_profile, to_env=profile_to_env)

    @property
    def resolved_endpoint(self) -> str:
        """The collector's base URL: ``endpoint``, else ``http://localhost:4318``."""
        return self.endpoint or DEFAULT_ENDPOINT

    # ------------------------------------------------------------------ readers

    @classmethod
    def from_master_config(cls, master_config: object, environ: Mapping[str, str] | None = None) -> TelemetryConfig:
        """Resolve the ``telemetry`` block of ``master_config`` merged with ``environ``.

        ``master_config`` may be a dict, an attribute object, a dataclass or a
        pydantic model; no block means disabled (unless the environment enables it).
        Raises ``ValueError`` on an unknown key, a wrong type or an out-of-range value.
        A standard ``OTEL_*`` fallback fills only a field the block did not give: a dict's key (even one set to
        the default value) or a pydantic field set explicitly wins over it; a dataclass or attribute object
        always has every field, so there a value equal to the default yields to the fallback.
        """
        block = _telemetry_block(master_config)
        return cls._resolve(block, os.environ if environ is None else environ, _given(master_config, block))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TelemetryConfig:
        """Resolve from the environment alone (what a worker does). Raises ``ValueError``."""
        return cls._resolve({}, os.environ if environ is None else environ)

    @classmethod
    def _resolve(
        cls, block: Mapping[str, Any], environ: Mapping[str, str], given: frozenset[str] | None = None
    ) -> TelemetryConfig:
        """``given``: the keys the user's block set (a dict's keys, a pydantic model's ``model_fields_set``);
        None for a shape that always carries every field (a dataclass, an attribute object), where a value
        equal to the default counts as not given, so the standard ``OTEL_*`` fallback still applies."""
        unknown = [k for k in block if k not in PARAMS]
        if unknown:
            key = unknown[0]
            close = difflib.get_close_matches(str(key), list(PARAMS), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"telemetry: unknown key {key!r}{hint}; allowed keys: {', '.join(sorted(PARAMS))}")
        environ = users_environ(environ)  # (never vLLM's service name, which lens_rl set, as its own)
        values: dict[str, Any] = {}
        for field, p in PARAMS.items():
            fallback = next((name for name in p.fallback if environ.get(name, "").strip()), None)
            # The fallback fills only what the user did not give: a dict's key set to the default value wins;
            # a dataclass's default value (every field is always there) must not hide it.
            in_block = block.get(field) is not None and (
                field in given if given is not None else not (fallback and block[field] == _DEFAULTS[field])
            )
            if p.env in environ and (environ[p.env].strip() or p.parse is parse_bool):
                raw: object = environ[p.env]
                where = f"{field} (from ${p.env})"
            elif in_block:
                raw, where = block[field], field
            elif fallback:
                raw, where = environ[fallback], f"{field} (from ${fallback})"
            else:
                continue
            values[field] = p.parse(raw, where)
        if "OTEL_SDK_DISABLED" in environ and parse_bool(environ["OTEL_SDK_DISABLED"], "OTEL_SDK_DISABLED"):
            values["enabled"] = False
        return cls(**values)

    # ------------------------------------------------------------------ writers

    def with_run_id(self, environ: Mapping[str, str] | None = None) -> TelemetryConfig:
        """This config with ``run_id`` filled: ``SLURM_JOB_ID``, else a short random hex."""
        if self.run_id:
            return self
        env = os.environ if environ is None else environ
        run_id = env.get("SLURM_JOB_ID", "").strip() or secrets.token_hex(4)
        return dataclasses.replace(self, run_id=run_id)

    def to_env(self) -> dict[str, str]:
        """The ``LENS_RL_OTEL_*`` variables that reproduce this config in a worker.

        Credentials never travel: an endpoint's userinfo is left out (workers
        authenticate with ``headers_file`` or the nodes' own ``OTEL_EXPORTER_OTLP_HEADERS``).
        """
        return {
            p.env: p.to_env(value) for field, p in PARAMS.items() if (value := getattr(self, field)) not in (None, ())
        }

    def headers(self, environ: Mapping[str, str] | None = None) -> dict[str, str] | None:
        """OTLP headers: ``OTEL_EXPORTER_OTLP_HEADERS`` merged with ``headers_file`` (the file wins).

        None when neither sets any (the exporter then reads its own env variables).
        Raises ``ValueError`` (naming the file, never its content) when the file cannot be read.
        """
        env = os.environ if environ is None else environ
        out = parse_headers(env.get("OTEL_EXPORTER_OTLP_HEADERS", ""), "$OTEL_EXPORTER_OTLP_HEADERS")
        if self.headers_file:
            try:
                with open(self.headers_file, encoding="utf-8") as handle:
                    out.update(parse_headers(handle.read(), f"headers_file {self.headers_file!r}"))
            except OSError as exc:
                raise ValueError(f"telemetry.headers_file: cannot read {self.headers_file!r}: {exc.strerror}") from None
        return out or None


#: field -> its declaration.
PARAMS: dict[str, Param] = {f.name: f.metadata["param"] for f in dataclasses.fields(TelemetryConfig)}
#: field -> the ``LENS_RL_OTEL_*`` variable that carries it.
ENV: dict[str, str] = {name: p.env for name, p in PARAMS.items()}
#: field -> the standard OpenTelemetry variables used, in order, when neither env nor YAML set it.
FALLBACK_ENV: dict[str, tuple[str, ...]] = {name: p.fallback for name, p in PARAMS.items() if p.fallback}
_DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(TelemetryConfig)}

CAMPAIGN_STAGE_ENV = "LENS_RL_OTEL_CAMPAIGN_STAGE"
RESOURCE_ATTRIBUTES_ENV = "LENS_RL_OTEL_RESOURCE_ATTRIBUTES"
#: The job's attempt (an int >= 0): set by the user or a launcher, else resolved by the driver and handed on.
ATTEMPT_ENV = "LENS_RL_OTEL_ATTEMPT"
#: When a launcher started the attempt (epoch seconds): the driver's ``launch`` span runs from it.
LAUNCH_TIME_ENV = "LENS_RL_OTEL_LAUNCH_TIME"
DEFAULT_ENDPOINT = "http://localhost:4318"
#: What ``vllm_tracing_kwargs`` wrote for vLLM's processes (JSON: variable -> [value written, the value before
#: or null]); a child inherits it with the values, so it can tell them from the user's.
VLLM_ENV = "LENS_RL_OTEL_VLLM_ENV"
#: Every ``LENS_RL_OTEL_*`` variable lens_rl reads; any other gets a did-you-mean warning.
KNOWN_ENV = frozenset(ENV.values()) | {
    CAMPAIGN_STAGE_ENV,
    RESOURCE_ATTRIBUTES_ENV,
    ATTEMPT_ENV,
    LAUNCH_TIME_ENV,
    VLLM_ENV,
}


def users_environ(environ: Mapping[str, str]) -> Mapping[str, str]:
    """``environ`` as the user set it: a variable lens_rl wrote for vLLM's processes (:data:`VLLM_ENV`, here or
    in a parent), while it still holds lens_rl's value, has its value from before (or is absent)."""
    raw = environ.get(VLLM_ENV)
    if not raw:
        return environ
    try:
        marks = json.loads(raw)
    except ValueError:
        return environ
    if not isinstance(marks, dict):
        return environ
    out = dict(environ)
    out.pop(VLLM_ENV, None)
    for name, mark in marks.items():
        if not (isinstance(mark, list) and len(mark) == 2 and out.get(name) == mark[0]):
            continue  # (changed since: the user's now)
        if isinstance(mark[1], str):
            out[name] = mark[1]
        else:
            out.pop(name, None)
    return out


def unknown_env_names(environ: Mapping[str, str] | None = None) -> list[tuple[str, str | None]]:
    """``LENS_RL_OTEL_*`` variables lens_rl does not know, each with its closest known name (or None)."""
    env = os.environ if environ is None else environ
    out = []
    for name in sorted(env):
        if name.startswith("LENS_RL_OTEL_") and name not in KNOWN_ENV:
            close = difflib.get_close_matches(name, sorted(KNOWN_ENV), n=1)
            out.append((name, close[0] if close else None))
    return out


def near_telemetry_key(master_config: object) -> str | None:
    """A top-level key of ``master_config`` that looks like a misspelt ``telemetry`` (``telemtry``)."""
    if master_config is None:
        return None
    try:
        if isinstance(master_config, Mapping):
            keys = [str(k) for k in master_config]
        else:
            keys = [k for k in dir(master_config) if not k.startswith("_")]
        if "telemetry" in keys:
            return None
        close = difflib.get_close_matches("telemetry", keys, n=1, cutoff=0.75)
        return close[0] if close else None
    except Exception as exc:
        internal_error(exc, "config-lookup")
        return None


def _telemetry_block(master_config: object) -> Mapping[str, Any]:
    """The ``telemetry`` block of any supported config shape, as a plain mapping."""
    if master_config is None:
        return {}
    if isinstance(master_config, TelemetryConfig):  # the block itself, passed as the whole config
        return _as_mapping(master_config, "telemetry")
    if isinstance(master_config, Mapping):
        block = master_config.get("telemetry")
    else:
        block = getattr(master_config, "telemetry", None)
    return _as_mapping(block, "telemetry")


def _given(master_config: object, block: Mapping[str, Any]) -> frozenset[str] | None:
    """The keys the user's telemetry block set, where its shape tells: a mapping's keys, a pydantic model's
    fields set explicitly (or whose value differs from lens_rl's default); None for a dataclass or an
    attribute object (every field always present)."""
    obj = master_config
    if not isinstance(master_config, TelemetryConfig):
        obj = master_config.get("telemetry") if isinstance(master_config, Mapping) else getattr(obj, "telemetry", None)
    if isinstance(obj, Mapping):
        return frozenset(block)
    fields_set = getattr(obj, "model_fields_set", None)  # pydantic v2 (v1: __fields_set__)
    if fields_set is None and hasattr(obj, "__fields__"):
        fields_set = getattr(obj, "__fields_set__", None)
    if not isinstance(fields_set, (set, frozenset)):
        return None
    # a model's own default that differs from lens_rl's is the user's value too
    return frozenset(fields_set) | {k for k, v in block.items() if k in _DEFAULTS and v != _DEFAULTS[k]}


def _as_mapping(obj: object, where: str) -> Mapping[str, Any]:
    if obj is None:
        return {}
    if isinstance(obj, TelemetryConfig):
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return obj
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    dump = getattr(obj, "model_dump", None)  # pydantic v2
    if callable(dump):
        return dump()
    as_dict = getattr(obj, "dict", None)  # pydantic v1
    if callable(as_dict) and hasattr(obj, "__fields__"):
        return as_dict()
    if hasattr(obj, "__dict__"):
        return {k: v for k, v in vars(obj).items() if not k.startswith("_")}
    raise ValueError(f"{where}: expected a mapping or an object with attributes, got {type(obj).__name__}")
