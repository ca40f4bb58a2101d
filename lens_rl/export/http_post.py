"""OTLP/HTTP sent by lens_rl: one POST of bytes it encoded, on a ``requests`` session of its own.

lens_rl encodes its spans itself (:func:`lens_rl.export.otlp.encode_request_bytes`) and its span pipeline owns
the retries, the split on 413 and the outage warnings, so the send is one POST answering the HTTP status: no
private name of OpenTelemetry's exporter drives it. Its settings are the OTLP exporter's, as OpenTelemetry's
documented environment variables name them (the signal's own first, e.g. ``OTEL_EXPORTER_OTLP_TRACES_COMPRESSION``,
then ``OTEL_EXPORTER_OTLP_COMPRESSION``): compression (``gzip``, ``deflate``, ``none``), the CA certificate file,
the client certificate and key; the endpoint, headers and timeout are lens_rl's (its config).

The session reads the environment once: ``requests`` merges proxies, ``.netrc`` and the CA bundle from the
environment on every request (``trust_env``), ~1 ms of CPU per batch with a training job's environment (as much
as encoding it). :func:`session_for` resolves them for the endpoint when the exporter is made, with requests'
precedence (a certificate file set for OTLP wins over the environment's CA bundle), and the session stops reading
them: a proxy variable changed later in the run is not seen. OpenTelemetry's own metric exporter is given the
same kind of session through its public ``session=`` argument.

Example::

    post = Poster("http://127.0.0.1:4318/v1/traces", {}, timeout_s=10.0)
    status = post(data)   # 200, 413, ..., or None when no answer came
"""

from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Mapping
from typing import Any

__all__ = ["Poster", "otlp_setting", "session_for"]


def otlp_setting(signal: str, name: str) -> str | None:
    """An OTLP exporter setting from the environment: ``OTEL_EXPORTER_OTLP_<SIGNAL>_<NAME>``, else
    ``OTEL_EXPORTER_OTLP_<NAME>`` (``signal``: ``traces`` or ``metrics``), else None."""
    value = os.environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_{name}") or os.environ.get(
        f"OTEL_EXPORTER_OTLP_{name}"
    )
    return value.strip() if value and value.strip() else None


def session_for(url: str, signal: str) -> Any:
    """A ``requests`` session for ``url`` with the environment's proxies, ``.netrc`` login and CA bundle read
    once (and OTLP's certificate settings for ``signal``), that reads the environment no more."""
    import requests
    from requests.utils import get_environ_proxies, get_netrc_auth

    session = requests.Session()
    session.proxies.update(get_environ_proxies(url))
    session.auth = get_netrc_auth(url)
    certificate = otlp_setting(signal, "CERTIFICATE")
    if url.startswith("https:"):
        session.verify = certificate or os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or True
    client_cert, client_key = otlp_setting(signal, "CLIENT_CERTIFICATE"), otlp_setting(signal, "CLIENT_KEY")
    if client_cert:
        session.cert = (client_cert, client_key) if client_key else client_cert
    session.trust_env = False
    return session


class Poster:
    """POSTs an encoded OTLP request to ``url`` and answers the HTTP status (None: no answer). Thread-safe
    as ``requests`` sessions are for sending; each call is one request, never retried here."""

    def __init__(self, url: str, headers: Mapping[str, str] | None, timeout_s: float, signal: str = "traces") -> None:
        self.url = url
        self.timeout_s = timeout_s
        self.session = session_for(url, signal)
        compression = (otlp_setting(signal, "COMPRESSION") or "none").lower()
        self.compression = compression if compression in ("gzip", "deflate") else None
        self.session.headers.update(headers or {})
        self.session.headers["Content-Type"] = "application/x-protobuf"
        if self.compression:
            self.session.headers["Content-Encoding"] = self.compression

    def __call__(self, data: bytes) -> int | None:
        if self.compression == "gzip":
            data = gzip.compress(data)
        elif self.compression == "deflate":
            data = zlib.compress(data)
        try:
            response = self.session.post(self.url, data=data, timeout=self.timeout_s)
        except OSError:  # requests' RequestException: refused, unreachable, timed out, a closed session's pool
            return None
        status: int = response.status_code
        response.close()
        return status

    def close(self) -> None:
        self.session.close()
