"""`TelemetryConfig`: the ``telemetry:`` block of a job's master config.

One resolution rule for every field, one boolean parser for the whole package,
and one validator that names the field, the value given and what is allowed.

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
import os
import secrets
from collections.abc import Callable, Mapping
from typing import Any

from lens_rl._errors import internal_error
from lens_rl.config.values import (
    as_endpoint,
    as_non_negative_int,
    as_path,
    as_positive_float,
    as_positive_int,
    as_rate,
    as_str,
    choice,
    mask_url,
    name_list,
    parse_bool,
    parse_headers,
    strip_userinfo,
)

__all__ = [
    "ENV",
    "FALLBACK_ENV",
    "TelemetryConfig",
    "mask_url",
    "parse_bool",
    "parse_headers",
    "strip_userinfo",
]

EXPORTERS = ("file", "otlp", "console", "none")
PROTOCOLS = ("http/protobuf", "grpc")
#: What the field ``instrument`` may name (``lens_rl.frameworks`` weaves each; a test keeps the two in step).
FRAMEWORKS = ("trl", "transformers", "verl", "nemo_rl", "skyrl", "openrlhf")

#: field -> the ``LENS_RL_OTEL_*`` variable that carries it.
ENV: dict[str, str] = {
    "enabled": "LENS_RL_OTEL_ENABLED",
    "service_name": "LENS_RL_OTEL_SERVICE_NAME",
    "exporter": "LENS_RL_OTEL_EXPORTER",
    "endpoint": "LENS_RL_OTEL_ENDPOINT",
    "protocol": "LENS_RL_OTEL_PROTOCOL",
    "trace_dir": "LENS_RL_OTEL_TRACE_DIR",
    "traces_enabled": "LENS_RL_OTEL_TRACES_ENABLED",
    "metrics_enabled": "LENS_RL_OTEL_METRICS_ENABLED",
    "metrics_interval_ms": "LENS_RL_OTEL_METRICS_INTERVAL_MS",
    "sample_rate": "LENS_RL_OTEL_SAMPLE_RATE",
    "export_timeout_ms": "LENS_RL_OTEL_EXPORT_TIMEOUT_MS",
    "vllm_native_tracing": "LENS_RL_OTEL_VLLM_NATIVE_TRACING",
    "run_id": "LENS_RL_OTEL_RUN_ID",
    # Extensions beyond the SPEC table (documented in the README).
    "max_queue_spans": "LENS_RL_OTEL_MAX_QUEUE_SPANS",
    "max_queue_bytes": "LENS_RL_OTEL_MAX_QUEUE_BYTES",
    "flush_on_step": "LENS_RL_OTEL_FLUSH_ON_STEP",
    "headers_file": "LENS_RL_OTEL_HEADERS_FILE",
    "heartbeat_interval_ms": "LENS_RL_OTEL_HEARTBEAT_INTERVAL_MS",
    "hang_timeout_s": "LENS_RL_OTEL_HANG_TIMEOUT_S",
    "instrument": "LENS_RL_OTEL_INSTRUMENT",
}

#: field -> the standard OpenTelemetry variable used when neither env nor YAML set it.
FALLBACK_ENV: dict[str, str] = {
    "service_name": "OTEL_SERVICE_NAME",
    "endpoint": "OTEL_EXPORTER_OTLP_ENDPOINT",
    "protocol": "OTEL_EXPORTER_OTLP_PROTOCOL",
}

CAMPAIGN_STAGE_ENV = "LENS_RL_OTEL_CAMPAIGN_STAGE"
RESOURCE_ATTRIBUTES_ENV = "LENS_RL_OTEL_RESOURCE_ATTRIBUTES"
#: The job's attempt (an int >= 0): set by the user or a launcher, else resolved by the driver and handed on.
ATTEMPT_ENV = "LENS_RL_OTEL_ATTEMPT"
#: When a launcher started the attempt (epoch seconds): the driver's ``launch`` span runs from it.
LAUNCH_TIME_ENV = "LENS_RL_OTEL_LAUNCH_TIME"
DEFAULT_ENDPOINT = "http://localhost:4318"
#: Every ``LENS_RL_OTEL_*`` variable lens_rl reads; any other gets a did-you-mean warning.
KNOWN_ENV = frozenset(ENV.values()) | {CAMPAIGN_STAGE_ENV, RESOURCE_ATTRIBUTES_ENV, ATTEMPT_ENV, LAUNCH_TIME_ENV}

_PARSERS: dict[str, Callable[[object, str], Any]] = {
    "enabled": parse_bool,
    "service_name": as_str,
    "exporter": choice(EXPORTERS),
    "endpoint": as_endpoint,
    "protocol": choice(PROTOCOLS),
    "trace_dir": as_str,
    "traces_enabled": parse_bool,
    "metrics_enabled": parse_bool,
    "metrics_interval_ms": as_positive_int,
    "sample_rate": as_rate,
    "export_timeout_ms": as_positive_int,
    "vllm_native_tracing": parse_bool,
    "run_id": as_str,
    "max_queue_spans": as_positive_int,
    "max_queue_bytes": as_positive_int,
    "flush_on_step": parse_bool,
    "headers_file": as_path,
    "heartbeat_interval_ms": as_non_negative_int,
    "hang_timeout_s": as_positive_float,
    "instrument": name_list(FRAMEWORKS),
}


@dataclasses.dataclass(frozen=True)
class TelemetryConfig:
    """The resolved, validated telemetry settings of one process.

    Fields, defaults and env vars are the SPEC's table; ``max_queue_spans`` (the
    span queue's bound, the memory cap during a collector outage) and
    ``flush_on_step`` (flush at the end of every step umbrella span) are extensions.
    ``endpoint`` is ``None`` when unset; :attr:`resolved_endpoint` applies the default.
    """

    enabled: bool = False
    service_name: str = "lens-rl"
    exporter: str = "file"
    endpoint: str | None = None
    protocol: str = "http/protobuf"
    trace_dir: str = "lens_traces"
    traces_enabled: bool = True
    metrics_enabled: bool = True
    metrics_interval_ms: int = 10000
    sample_rate: float = 1.0
    export_timeout_ms: int = 10000
    vllm_native_tracing: bool = False
    run_id: str | None = None
    max_queue_spans: int = 32768
    max_queue_bytes: int = 64 * 1024 * 1024
    flush_on_step: bool = False
    headers_file: str | None = None
    heartbeat_interval_ms: int = 10000
    hang_timeout_s: float = 600.0
    #: frameworks woven at init (``lens_rl.instrument``): ``trl``, ``verl``, ... or ``all``; none by default
    instrument: tuple[str, ...] = ()

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
        """
        block = _telemetry_block(master_config)
        return cls._resolve(block, os.environ if environ is None else environ)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TelemetryConfig:
        """Resolve from the environment alone (what a worker does). Raises ``ValueError``."""
        return cls._resolve({}, os.environ if environ is None else environ)

    @classmethod
    def _resolve(cls, block: Mapping[str, Any], environ: Mapping[str, str]) -> TelemetryConfig:
        unknown = [k for k in block if k not in _PARSERS]
        if unknown:
            key = unknown[0]
            close = difflib.get_close_matches(str(key), list(_PARSERS), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"telemetry: unknown key {key!r}{hint} allowed keys: {', '.join(sorted(_PARSERS))}")
        values: dict[str, Any] = {}
        defaults = {f.name: f.default for f in dataclasses.fields(cls)}
        for field, parse in _PARSERS.items():
            env_name = ENV[field]
            fallback = environ.get(FALLBACK_ENV[field], "").strip() if field in FALLBACK_ENV else ""
            # A dataclass or pydantic block carries every field; its default value must
            # not hide the standard OTEL_* fallback the way an explicit setting does.
            in_block = block.get(field) is not None and not (fallback and block[field] == defaults[field])
            if env_name in environ and (environ[env_name].strip() or parse is parse_bool):
                raw: object = environ[env_name]
                where = f"{field} (from ${env_name})"
            elif in_block:
                raw, where = block[field], field
            elif fallback:
                raw = environ[FALLBACK_ENV[field]]
                where = f"{field} (from ${FALLBACK_ENV[field]})"
            else:
                continue
            values[field] = parse(raw, where)
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
        env: dict[str, str] = {}
        for field in _PARSERS:
            value = getattr(self, field)
            if value is None or value == ():
                continue
            if isinstance(value, tuple):
                text = ",".join(value)
            else:
                text = ("true" if value else "false") if isinstance(value, bool) else str(value)
            env[ENV[field]] = strip_userinfo(text) if field == "endpoint" else text
        return env

    def headers(self, environ: Mapping[str, str] | None = None) -> dict[str, str] | None:
        """OTLP headers: ``OTEL_EXPORTER_OTLP_HEADERS`` merged with ``headers_file`` (the file wins).

        None when neither sets any (the exporter then reads its own env variables).
        Raises ``ValueError`` (naming the file, never its content) when the file cannot be read.
        """
        env = os.environ if environ is None else environ
        out = parse_headers(env.get("OTEL_EXPORTER_OTLP_HEADERS", ""))
        if self.headers_file:
            try:
                with open(self.headers_file, encoding="utf-8") as handle:
                    out.update(parse_headers(handle.read()))
            except OSError as exc:
                raise ValueError(f"telemetry.headers_file: cannot read {self.headers_file!r}: {exc.strerror}") from None
        return out or None


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
