"""lens_rl's OTLP/HTTP send: one POST of its own bytes on its own session, the HTTP status answered."""

from __future__ import annotations

import pytest

from lens_rl.export.http_post import Poster, otlp_setting, session_for
from lens_rl.testing import OTLPReceiver, refused_endpoint


def test_one_post_answers_the_http_status(receiver: OTLPReceiver) -> None:
    """A send is one request to a real receiver answering its status (200, then a collector's 413)."""
    post = Poster(receiver.endpoint + "/v1/traces", {"authorization": "Bearer x"}, timeout_s=5)
    assert post(b"") == 200
    receiver.fail_status = 413
    assert post(b"") == 413
    assert receiver.requests == 2
    assert receiver.headers[0]["authorization"] == "Bearer x"
    assert receiver.headers[0]["Content-Type"] == "application/x-protobuf"
    post.close()


def test_no_answer_is_none() -> None:
    """A collector that refuses the connection answers None (retried by the pipeline), never raises."""
    post = Poster(refused_endpoint() + "/v1/traces", None, timeout_s=2)
    assert post(b"x") is None


def test_compression_from_otlps_environment_variable(receiver: OTLPReceiver, monkeypatch: pytest.MonkeyPatch) -> None:
    """OTEL_EXPORTER_OTLP_TRACES_COMPRESSION=gzip (or the general variable) gzips the body, as OTLP says."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
    post = Poster(receiver.endpoint + "/v1/traces", None, timeout_s=5)
    assert post.compression == "gzip" and post(b"") == 200
    assert receiver.headers[0]["Content-Encoding"] == "gzip"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "none")  # the signal's own wins
    assert Poster(receiver.endpoint, None, timeout_s=5).compression is None


def test_the_environment_is_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Proxies and the CA bundle are resolved when the session is made; the session reads no more of them."""
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/etc/bundle.pem")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE", "/etc/otlp.pem")
    session = session_for("https://collector.example:4318/v1/metrics", "metrics")
    assert session.trust_env is False
    assert session.proxies["https"] == "http://proxy.invalid:3128"
    assert session.verify == "/etc/otlp.pem"  # OTLP's certificate wins over the environment's bundle
    assert session_for("https://collector.example:4318/v1/traces", "traces").verify == "/etc/bundle.pem"
    monkeypatch.setenv("NO_PROXY", "collector.example")
    assert session_for("https://collector.example:4318/v1/traces", "traces").proxies == {}
    assert otlp_setting("traces", "CERTIFICATE") is None
