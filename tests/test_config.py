"""TelemetryConfig: fields, precedence, the boolean parser, and error messages."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from types import SimpleNamespace

import pydantic
import pytest

from lens_rl.config import ENV, PARAMS, TelemetryConfig, parse_bool
from tests.conftest import run_python


def test_missing_block_means_disabled() -> None:
    """A master config without a telemetry block resolves to telemetry off."""
    assert TelemetryConfig.from_master_config({"policy": {}}, environ={}).enabled is False
    assert TelemetryConfig.from_master_config(None, environ={}).enabled is False


def test_defaults_match_the_spec_table() -> None:
    """Every field's default is the SPEC's."""
    cfg = TelemetryConfig.from_master_config({"telemetry": {"enabled": True}}, environ={})
    assert (cfg.service_name, cfg.exporter, cfg.endpoint, cfg.protocol, cfg.trace_dir) == (
        "lens-rl",
        "file",
        None,
        "http/protobuf",
        "lens_traces",
    )
    assert (cfg.traces_enabled, cfg.metrics_enabled, cfg.metrics_interval_ms) == (True, True, 10000)
    assert (cfg.sample_rate, cfg.export_timeout_ms, cfg.vllm_native_tracing, cfg.run_id) == (1.0, 10000, False, None)
    assert cfg.resolved_endpoint == "http://localhost:4318"


@pytest.mark.parametrize(
    "text, expected",
    [
        ("1", True),
        ("true", True),
        (" YES ", True),
        ("On", True),
        ("0", False),
        ("false", False),
        ("No", False),
        ("off", False),
        ("", False),
        ("  ", False),
    ],
)
def test_one_boolean_parser(text: str, expected: bool) -> None:
    """The one parser accepts 1/true/yes/on and 0/false/no/off/"" in any case, stripped."""
    assert parse_bool(text) is expected


@pytest.mark.parametrize("text", ["maybe", "2", "tru", "enabled"])
def test_boolean_parser_rejects_everything_else(text: str) -> None:
    """Any other text is invalid, and the error says what is allowed."""
    with pytest.raises(ValueError, match="allowed: true/false"):
        parse_bool(text, "enabled")


@dataclasses.dataclass
class _DC:
    enabled: bool = True
    exporter: str = "console"


class _Model(pydantic.BaseModel):
    enabled: bool = True
    sample_rate: float = 0.5


@pytest.mark.parametrize(
    "master, field, value",
    [
        ({"telemetry": {"enabled": True, "exporter": "console"}}, "exporter", "console"),
        (SimpleNamespace(telemetry=SimpleNamespace(enabled=True, exporter="none")), "exporter", "none"),
        (SimpleNamespace(telemetry=_DC()), "exporter", "console"),
        ({"telemetry": _Model()}, "sample_rate", 0.5),
        (SimpleNamespace(telemetry={"enabled": True, "service_name": "svc"}), "service_name", "svc"),
    ],
)
def test_reads_every_config_shape(master: object, field: str, value: object) -> None:
    """Dicts, attribute objects, dataclasses and pydantic models all work."""
    cfg = TelemetryConfig.from_master_config(master, environ={})
    assert cfg.enabled is True
    assert getattr(cfg, field) == value


def test_env_wins_over_yaml_which_wins_over_otel_fallback() -> None:
    """Precedence: LENS_RL env > YAML > OTEL_* fallback > default."""
    yaml = {"telemetry": {"enabled": True, "service_name": "from-yaml", "endpoint": "http://yaml:4318"}}
    env = {
        "LENS_RL_OTEL_SERVICE_NAME": "from-env",
        "OTEL_SERVICE_NAME": "from-otel",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel:4318",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
    }
    cfg = TelemetryConfig.from_master_config(yaml, environ=env)
    assert cfg.service_name == "from-env"
    assert cfg.endpoint == "http://yaml:4318"
    assert cfg.protocol == "grpc"


def test_otel_fallbacks_used_when_nothing_else_is_set() -> None:
    """OTEL_SERVICE_NAME and OTEL_EXPORTER_OTLP_ENDPOINT fill unset fields."""
    env = {"LENS_RL_OTEL_ENABLED": "1", "OTEL_SERVICE_NAME": "svc", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"}
    cfg = TelemetryConfig.from_env(env)
    assert (cfg.enabled, cfg.service_name, cfg.endpoint) == (True, "svc", "http://c:4318")


def test_otel_sdk_disabled_forces_off() -> None:
    """OTEL_SDK_DISABLED=true turns telemetry off whatever else says on."""
    env = {"LENS_RL_OTEL_ENABLED": "true", "OTEL_SDK_DISABLED": "TRUE"}
    assert TelemetryConfig.from_master_config({"telemetry": {"enabled": True}}, environ=env).enabled is False


def test_unknown_key_suggests_the_close_one() -> None:
    """A typo names the key, suggests the field meant and lists the allowed keys."""
    with pytest.raises(ValueError, match=r"unknown key 'enabeld'; did you mean 'enabled'\?"):
        TelemetryConfig.from_master_config({"telemetry": {"enabeld": True}}, environ={})


@pytest.mark.parametrize(
    "block, fragment",
    [
        ({"enabled": "maybe"}, "telemetry.enabled: invalid boolean 'maybe'"),
        ({"enabled": 3}, "telemetry.enabled: invalid boolean 3"),
        ({"exporter": "jaeger"}, "telemetry.exporter: invalid value 'jaeger'; allowed: file, otlp, console, none"),
        ({"protocol": "http/json"}, "allowed: http/protobuf, grpc"),
        ({"sample_rate": 1.5}, "telemetry.sample_rate: expected a number in [0, 1], got 1.5"),
        ({"sample_rate": float("nan")}, "sample_rate"),
        ({"metrics_interval_ms": 0}, "telemetry.metrics_interval_ms: expected an integer > 0, got 0"),
        ({"export_timeout_ms": "soon"}, "export_timeout_ms"),
        ({"export_timeout_ms": True}, "export_timeout_ms"),
        ({"service_name": ""}, "telemetry.service_name: must not be empty"),
        ({"service_name": ["a"]}, "expected a string"),
    ],
)
def test_bad_values_name_field_value_and_allowed(block: dict, fragment: str) -> None:
    """Each invalid value raises ValueError naming the field, the value and what is allowed."""
    with pytest.raises(ValueError) as info:
        TelemetryConfig.from_master_config({"telemetry": {"enabled": True, **block}}, environ={})
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    "block, fragment",
    [
        ({"zzzz": 1}, "telemetry: unknown key 'zzzz'; allowed keys: "),
        ({"instrument": "bogus"}, "telemetry.instrument: unknown framework 'bogus'; allowed: "),
        ({"profile": {"zzzz": 1}}, "telemetry.profile: unknown key 'zzzz'; allowed keys: "),
    ],
)
def test_an_unknown_name_and_the_allowed_ones_are_two_clauses(block: dict, fragment: str) -> None:
    """The name refused and the list of allowed ones are separated ('...'; allowed ...), not run together."""
    with pytest.raises(ValueError) as info:
        TelemetryConfig.from_master_config({"telemetry": {"enabled": True, **block}}, environ={})
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    "endpoint",
    ["http://collector host:4318", "http://exa mple.com", "http://u:s3cr3tPW@ho st:4318", "http://exa\tmple.com"],
)
def test_a_malformed_endpoint_is_refused_its_password_masked(endpoint: str) -> None:
    """A space, a control character or an impossible host in the endpoint: ValueError naming the field and
    what is allowed, the value shown with its userinfo masked."""
    with pytest.raises(ValueError, match=r"telemetry\.endpoint: invalid .*; allowed: ") as info:
        TelemetryConfig.from_master_config({"telemetry": {"enabled": True, "endpoint": endpoint}}, environ={})
    assert "s3cr3tPW" not in str(info.value)


def test_an_endpoint_without_a_scheme_is_refused_its_password_masked() -> None:
    """``user:pw@collector:4318`` (no scheme): the driver's ValueError and a worker's one warning (the value from
    $OTEL_EXPORTER_OTLP_ENDPOINT or $LENS_RL_OTEL_ENDPOINT) show it as ``[REDACTED]@collector:4318``."""
    import lens_rl

    with pytest.raises(ValueError, match=r"invalid endpoint '\[REDACTED\]@collector:4318'; allowed:") as info:
        lens_rl.init_telemetry_driver(
            {"telemetry": {"enabled": True, "exporter": "otlp", "endpoint": "user:s3cr3tPW@collector:4318"}}
        )
    assert "s3cr3tPW" not in str(info.value)
    for variable in ("OTEL_EXPORTER_OTLP_ENDPOINT", "LENS_RL_OTEL_ENDPOINT"):
        env = {
            "LENS_RL_OTEL_ENABLED": "true",
            "LENS_RL_OTEL_EXPORTER": "otlp",
            variable: "user:s3cr3tPW@collector:4318",
        }
        out = run_python("import lens_rl; lens_rl.init_telemetry_worker(rank=0, world_size=1)", env=env)
        assert f"(from ${variable}): invalid endpoint '[REDACTED]@collector:4318'" in out.stderr, out.stderr
        assert "s3cr3tPW" not in out.stderr


@pytest.mark.parametrize("field", ["trace_dir", "run_id", "service_name"])
def test_a_nul_byte_is_refused_naming_the_field(tmp_path: Path, field: str) -> None:
    """A NUL byte (which no path or name can hold) is refused by validation, naming the field, the value and
    what is allowed, not later by the OS as a bare 'embedded null byte'."""
    import lens_rl

    block = {"enabled": True, "trace_dir": str(tmp_path), field: "a\x00b"}
    with pytest.raises(ValueError, match=rf"telemetry\.{field}: invalid value 'a\\x00b'; allowed: text without NUL"):
        lens_rl.init_telemetry_driver({"telemetry": block})


def test_bad_env_value_names_the_variable() -> None:
    """A bad value from the environment says which variable it came from."""
    with pytest.raises(ValueError, match=r"sample_rate \(from \$LENS_RL_OTEL_SAMPLE_RATE\)"):
        TelemetryConfig.from_env({"LENS_RL_OTEL_ENABLED": "1", "LENS_RL_OTEL_SAMPLE_RATE": "lots"})


def test_env_projection_round_trips() -> None:
    """to_env() then from_env() reproduces the same config (what workers receive)."""
    cfg = TelemetryConfig(enabled=True, exporter="otlp", endpoint="http://x:1", sample_rate=0.25, run_id="r1")
    assert TelemetryConfig.from_env(cfg.to_env()) == cfg
    assert set(cfg.to_env()) <= set(ENV.values())


def test_run_id_from_slurm_else_random() -> None:
    """run_id defaults to SLURM_JOB_ID, else a short random hex."""
    assert TelemetryConfig(enabled=True).with_run_id({"SLURM_JOB_ID": "4242"}).run_id == "4242"
    rid = TelemetryConfig(enabled=True).with_run_id({}).run_id
    assert rid and len(rid) == 8 and int(rid, 16) >= 0
    assert TelemetryConfig(enabled=True, run_id="mine").with_run_id({"SLURM_JOB_ID": "1"}).run_id == "mine"


def test_a_telemetry_config_can_be_the_block_or_the_whole_config() -> None:
    """A TelemetryConfig works as the telemetry block and as the master config itself."""
    cfg = TelemetryConfig(enabled=True, exporter="none", sample_rate=0.5)
    assert TelemetryConfig.from_master_config({"telemetry": cfg}, environ={}) == cfg
    assert TelemetryConfig.from_master_config(cfg, environ={}) == cfg


def test_a_model_default_does_not_hide_the_otel_fallback() -> None:
    """A dataclass block's default service_name yields to OTEL_SERVICE_NAME; a set value does not."""
    env = {"OTEL_SERVICE_NAME": "from-otel"}
    assert (
        TelemetryConfig.from_master_config({"telemetry": TelemetryConfig(enabled=True)}, environ=env).service_name
        == "from-otel"
    )
    mine = TelemetryConfig(enabled=True, service_name="mine")
    assert TelemetryConfig.from_master_config({"telemetry": mine}, environ=env).service_name == "mine"


def test_a_dict_value_equal_to_the_default_wins_over_the_otel_fallback() -> None:
    """A dict block that writes the default protocol or service name keeps it against OTEL_* fallbacks; a key
    it leaves out (or null) takes the fallback."""
    env = {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_SERVICE_NAME": "from-otel"}
    given = {"telemetry": {"enabled": True, "protocol": "http/protobuf", "service_name": "lens-rl"}}
    cfg = TelemetryConfig.from_master_config(given, environ=env)
    assert (cfg.protocol, cfg.service_name) == ("http/protobuf", "lens-rl")
    cfg = TelemetryConfig.from_master_config({"telemetry": {"enabled": True, "service_name": None}}, environ=env)
    assert (cfg.protocol, cfg.service_name) == ("grpc", "from-otel")


def test_a_pydantic_field_set_explicitly_wins_over_the_otel_fallback() -> None:
    """A pydantic block's field set to the default value wins over OTEL_*; a field left unset takes it."""

    class Telemetry(pydantic.BaseModel):
        enabled: bool = False
        protocol: str = "http/protobuf"
        service_name: str = "lens-rl"

    env = {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_SERVICE_NAME": "from-otel"}
    block = Telemetry(enabled=True, protocol="http/protobuf")
    cfg = TelemetryConfig.from_master_config({"telemetry": block}, environ=env)
    assert (cfg.protocol, cfg.service_name) == ("http/protobuf", "from-otel")


def _readme_config_rows() -> dict[str, tuple[str, str]]:
    """The README's configuration table: field -> (default cell, env var cell)."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Configuration\n", 1)[1].split("\n## ", 1)[0]
    header = section.index("| field | default | env var |")
    rows: dict[str, tuple[str, str]] = {}
    for line in section[header:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        field, default, env = (cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:4])
        rows[field] = (default, env)
    return rows


def _documents_default(cell: str, default: object) -> bool:
    """The default cell opens with the declared default (``none``, ``true``, a number, a backticked string or list)."""
    token = cell.split(" ", 1)[0]
    if default is None or isinstance(default, bool) or default == ():
        return token == {None: "none", True: "true", False: "false", (): "none"}[default]
    if isinstance(default, tuple):
        return token == f"`{','.join(map(str, default))}`"
    if isinstance(default, (int, float)):
        return float(token) == default
    return token == f"`{default}`"


def test_the_readme_table_documents_every_declared_field() -> None:
    """The README's configuration table has one row per field, with its env var, fallbacks and default."""
    rows = _readme_config_rows()
    assert list(rows) == list(PARAMS)
    defaults = {f.name: f.default for f in dataclasses.fields(TelemetryConfig)}
    for field, (default, env) in rows.items():
        names = re.findall(r"`([A-Z][A-Z0-9_]+)`", env)
        assert names == [ENV[field], *PARAMS[field].fallback], field
        assert _documents_default(default, defaults[field]), (field, default)


@pytest.mark.parametrize(
    ("field", "value", "allowed"),
    [
        ("gpu_sample_hz", 11, "from 0 (off) to 10"),
        ("gpu_sample_hz", -1, "from 0 (off) to 10"),
        ("gpu_sample_hz", "fast", "from 0 (off) to 10"),
        ("gpu_sample_hz", True, "from 0 (off) to 10"),
        ("gpu_sample_hz", float("nan"), "from 0 (off) to 10"),
        ("gpu_idle_alert_s", 0, "seconds > 0"),
        ("gpu_idle_alert_s", "soon", "seconds > 0"),
    ],
)
def test_gpu_fields_refuse_bad_values_naming_them(field: str, value: object, allowed: str) -> None:
    """A bad GPU sampling rate or idle alert is a ValueError naming the field, the value and what is allowed."""
    with pytest.raises(ValueError, match=rf"telemetry\.{field}: invalid value .*allowed: .*{re.escape(allowed)}"):
        TelemetryConfig.from_master_config({"telemetry": {field: value}}, environ={})


def test_gpu_fields_default_and_come_from_the_environment() -> None:
    """gpu_sample_hz is 2 and gpu_idle_alert_s 300 by default; their env vars set them (0 turns sampling off)."""
    assert TelemetryConfig.from_env({}).gpu_sample_hz == 2.0
    assert TelemetryConfig.from_env({}).gpu_idle_alert_s == 300.0
    env = {"LENS_RL_OTEL_GPU_SAMPLE_HZ": "0", "LENS_RL_OTEL_GPU_IDLE_ALERT_S": "60"}
    cfg = TelemetryConfig.from_env(env)
    assert (cfg.gpu_sample_hz, cfg.gpu_idle_alert_s) == (0.0, 60.0)
    assert TelemetryConfig.from_env({"LENS_RL_OTEL_GPU_SAMPLE_HZ": "0.5"}).gpu_sample_hz == 0.5
    with pytest.raises(ValueError, match=r"gpu_sample_hz \(from \$LENS_RL_OTEL_GPU_SAMPLE_HZ\)"):
        TelemetryConfig.from_env({"LENS_RL_OTEL_GPU_SAMPLE_HZ": "20"})
