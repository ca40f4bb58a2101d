"""Attribute hygiene: any value coerced and bounded, secrets redacted at any depth, token counts kept."""

from __future__ import annotations

import dataclasses
import json
import types
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lens_rl import traced_phase
from lens_rl._attributes import MAX_VALUE_CHARS, REDACTED, clean_attributes, clean_value
from lens_rl.testing import OTLPReceiver
from tests.conftest import run_python

SECRET = "hunter2-s3cr3t"


def _exported(value: Any) -> str:
    return json.dumps(value)


def _otlp(endpoint: str, **extra: Any) -> dict[str, Any]:
    return {"telemetry": {"enabled": True, "exporter": "otlp", "endpoint": endpoint, "metrics_enabled": False, **extra}}


TOKEN_COUNT_KEYS = [
    "rl.num_tokens",
    "rl.max_tokens",
    "rl.tokens_per_s",
    "gen_ai.usage.input_tokens",
    "pad_token_id",
    "access_token_ttl",
    "eos_token_id",
]


SECRET_KEYS = [
    "api_key",
    "apiKey",
    "OPENAI_API_KEY",
    "db.password",
    "pwd",
    "passphrase",
    "client_secret",
    "auth",
    "Authorization",
    "jwt",
    "ssh_key",
    "private_key",
    "dsn",
    "hmac",
    "cookie",
    "aws.credentials",
    "signature",
    "x-bearer",
    "passWord",
    "PassWord",
    "pass_word",
    "user.pass-word",
    "passPhrase",
    "pass_phrase",
    "oauth",
    "oauth_client_secret_id",
    "oauthRefresh",
    "OAuthState",
    "smtp.passwd",
    "apikeys",
    "credential",
    "DB_PASSWORDS",
]

#: Keys that look like a secret's to a substring match but whose segments are not secret.
PLAIN_KEYS = ["passenger", "bypass_word_count", "compass", "author", "passage", "keyword", "tokens_per_s"]


@given(key=st.sampled_from(TOKEN_COUNT_KEYS), value=st.one_of(st.integers(-(2**62), 2**62), st.floats(), st.booleans()))
@settings(max_examples=200, deadline=None)
def test_numbers_under_token_count_keys_are_never_redacted(key: str, value: Any) -> None:
    """Token counts are the central numbers of an RL job: never "[REDACTED]"."""
    out = clean_attributes({key: value})
    assert out[key] == value or (value != value and out[key] != out[key])


def test_keys_whose_segments_are_not_secret_keep_their_values() -> None:
    """A secret word inside another word (``passenger``, ``author``) is no secret segment: the value is kept."""
    assert clean_attributes({key: "v" for key in PLAIN_KEYS}) == {key: "v" for key in PLAIN_KEYS}


@given(
    key=st.sampled_from(SECRET_KEYS), value=st.one_of(st.text(min_size=1), st.integers(), st.floats(allow_nan=False))
)
@settings(max_examples=200, deadline=None)
def test_any_value_under_a_secret_key_is_redacted(key: str, value: Any) -> None:
    """Under password/secret/apikey/... keys every value is redacted, numbers included."""
    assert clean_attributes({key: value})[key] == REDACTED


def _nest(depth: int, kind: str, secret: str) -> Any:
    inner: Any = {"token": secret}
    for i in range(depth):
        if kind == "mapping":
            inner = {"level": i, "child": inner}
        elif kind == "pairs":
            inner = [("level", i), ("child", inner)]
        elif kind == "dataclass":
            inner = _Box(i, inner)
        else:
            inner = types.SimpleNamespace(level=i, child=inner)
    return inner


@dataclasses.dataclass
class _Box:
    level: int
    child: Any


@given(
    depth=st.integers(0, 4),
    kind=st.sampled_from(["mapping", "pairs", "dataclass", "namespace"]),
    secret=st.text(alphabet="abcdefghijklmnop0123456789", min_size=8, max_size=20),
)
@settings(max_examples=100, deadline=None)
def test_secret_strings_are_never_exported_at_any_depth(depth: int, kind: str, secret: str) -> None:
    """A secret nested in mappings, lists of pairs, dataclasses or namespaces never reaches the export."""
    out = clean_attributes({"rl.config": _nest(depth, kind, secret)})
    assert secret not in _exported(out) and REDACTED in _exported(out)


@pytest.mark.parametrize(
    "value",
    [
        f"https://user:{SECRET}@host/path",
        f"Bearer {SECRET}",
        f"Basic {SECRET}",
        f"curl -H 'Authorization: Bearer {SECRET}' http://x",
    ],
)
def test_credentials_in_values_are_masked_whatever_the_key(value: str) -> None:
    """URL userinfo passwords and Bearer / Basic credentials are masked under harmless keys too."""
    out = clean_attributes({"rl.note": value, "rl.list": [value, "x"]})
    assert SECRET not in _exported(out)


def hostile_values() -> tuple[Any, ...]:
    """A self-referencing, a 10,000-deep and a 100,000-key container (benchmarks/test_speed.py times them)."""
    loop: list[Any] = [1]
    loop.append(loop)
    loop.append(loop)
    deep: list[Any] = []
    node = deep
    for _ in range(10_000):
        node.append([])
        node = node[0]
    wide = {f"k{i}": list(range(100)) for i in range(100_000)}
    return loop, deep, wide


def test_coercion_of_hostile_values_is_bounded() -> None:
    """Self-referencing, 10,000-deep and 100,000-key containers coerce to a bounded string (never a recursion error)."""
    for value in hostile_values():
        out = clean_value(value)
        assert isinstance(out, str) and len(out) <= 4096


def test_lone_surrogates_are_repaired_when_recorded(receiver: OTLPReceiver) -> None:
    """A lone surrogate in a span name, an exception message or an attribute never makes a batch unencodable."""
    code = f"""
        import lens_rl
        lens_rl.init_telemetry_driver({_otlp(receiver.endpoint)!r}, "grpo")
        bad = "bad\\udc80text"
        with lens_rl.traced_phase("name " + bad) as span:
            span.set_attribute("rl.note", bad)
        try:
            with lens_rl.traced_phase("reward"):
                raise ValueError(bad)
        except ValueError:
            pass
        with lens_rl.traced_phase("after"):
            pass
        assert lens_rl.shutdown_telemetry(5000)
    """
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    assert receiver.wait_for_spans(4, 10)
    names = {s["name"] for s in receiver.spans}
    assert {"reward", "after"} <= names and any(n.startswith("name bad") for n in names)


class _Weird:
    def __repr__(self) -> str:
        raise RuntimeError("repr explodes")


@pytest.mark.parametrize(
    "value, expected",
    [
        (None, "dropped"),
        (b"\xff\xfebytes", str),
        ({"a": {"b": [1, {"c": 2}]}}, str),
        ("x" * 100_000, str),
        ([1, "a", None], str),
        ([1, 2, 3], list),
        (2**80, str),
        (float("nan"), float),
        pytest.param(_Weird(), "dropped", marks=pytest.mark.expects_internal_error),
        (object(), str),
        ({"token": "s3cr3t"}, str),
    ],
)
def test_attribute_values_are_coerced_dropped_and_bounded(value: Any, expected: Any) -> None:
    """Any attribute value is coerced or dropped, never raised on, and length-limited."""
    out = clean_attributes({"k": value})
    if expected == "dropped":
        assert "k" not in out
        return
    assert isinstance(out["k"], expected)
    if isinstance(out["k"], str):
        assert len(out["k"]) <= MAX_VALUE_CHARS and "s3cr3t" not in out["k"]


def test_numpy_scalars_become_python_numbers() -> None:
    """numpy scalars are recorded as plain numbers."""
    np = pytest.importorskip("numpy")
    assert clean_attributes({"a": np.float32(1.5), "b": np.int64(3), "c": np.bool_(True)}) == {
        "a": 1.5,
        "b": 3,
        "c": True,
    }


def test_hostile_phase_attributes_still_record(lens_spans: Any) -> None:
    """A phase given odd attribute values still records, with the values coerced."""
    with traced_phase("generation", blob=b"\x00\x01", nested={"x": [1, {"y": None}]}, huge="z" * 10_000, nothing=None):
        pass
    attrs = lens_spans.find("generation").attributes
    assert isinstance(attrs["rl.blob"], str) and len(attrs["rl.huge"]) <= MAX_VALUE_CHARS and "rl.nothing" not in attrs


def test_secret_looking_attributes_are_redacted(lens_spans: Any) -> None:
    """api_key, token, password, secret, authorization... never leave the process."""
    with traced_phase(
        "generation", api_key="sk-1", attributes={"hf_token": "hf-2", "db.password": "p", "ok": 1}
    ) as span:
        span.set_attribute("Authorization", "Bearer x")
        span.add_event("call", {"client_secret": "c"})
    span = lens_spans.find("generation")
    attrs = dict(span.attributes)
    assert attrs["rl.api_key"] == attrs["hf_token"] == attrs["db.password"] == attrs["Authorization"] == "[REDACTED]"
    assert attrs["ok"] == 1 and span.events[0].attributes["client_secret"] == "[REDACTED]"


def test_a_huge_word_holding_userinfo_is_masked_without_reading_it_twice() -> None:
    """A word of 10,000 characters holding a password before its ``@`` (an exporter's error text quoting a
    hostile value): masked up to its ``@``, with the short words around it masked by the usual rule."""
    from lens_rl._attributes import REDACTED, mask_url

    huge = "=a" * 5000 + ":s3cr3t@host"
    out = mask_url(f"to user:pw@h:1 then {huge} end")
    assert "s3cr3t" not in out and "pw@" not in out
    assert out == f"to {REDACTED}@h:1 then {REDACTED}@host end"
