"""The one home of OpenTelemetry's private names, across the supported range (1.33 to the newest 1.x): every
name found or its adaptation in use, each adapted name where _sdk.ADAPTED says it is on the installed release,
the ReadableSpan fields FastSpan fills as the SDK reads them. .ci/otel-range.sh runs this file at both ends
of the range (the floor the resolver picks, 1.33.0, and the newest 1.x).

What _sdk.py adapts, and the releases (see _sdk.ADAPTED): the module whose ``random`` the exporters' retry
jitter draws (1.45+: the HTTP client's, ``opentelemetry.exporter.otlp.common.http``; 1.35-1.44: each exporter
module's own; none before), which lens_rl points at its own stream. The OTLP/HTTP send path is public (tests:
tests/export/test_http_post.py).
"""

from __future__ import annotations

import random

from lens_rl.export import _sdk


def test_opentelemetry_is_within_the_supported_range() -> None:
    """The installed OpenTelemetry api, sdk and OTLP/HTTP exporter are one 1.x release at or past the floor."""
    versions = _sdk.installed_versions()
    core = {
        versions[name] for name in ("opentelemetry-api", "opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-http")
    }
    assert len(core) == 1, versions
    assert _sdk.FLOOR <= _sdk.version_of() < (2, 0), versions


def test_no_fallback_is_in_use_on_a_supported_release() -> None:
    """Every private name _sdk.py reads exists on the installed release, in its current or its older form."""
    from opentelemetry.sdk.trace import TracerProvider

    assert _sdk.span_fan_out(TracerProvider()) is not None
    assert _sdk.missing() == []


def test_each_adapted_name_is_where_the_table_says_for_this_release() -> None:
    """Each name _sdk.ADAPTED lists is present on exactly the releases it names: a release that moves one
    again fails here, naming it."""
    installed, found = _sdk.version_of("opentelemetry-exporter-otlp-proto-http"), _sdk.present()
    wrong = [
        (name, releases, found[name])
        for name, releases, _ in _sdk.ADAPTED
        if found[name] != (releases[0] <= installed < releases[1])
    ]
    assert wrong == [], f"OpenTelemetry {installed}: (name, releases that have it, found) {wrong}"


def test_exporters_draw_their_retry_jitter_from_lens_rls_stream() -> None:
    """Once lens_rl made an OTLP exporter, the exporter modules' retry jitter reads lens_rl's own stream (the
    module's one name replaced, no function copied), so an exporter's retry never shifts the job's random."""
    import sys

    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    from lens_rl.export.ids import STREAM

    OTLPMetricExporter(endpoint="http://127.0.0.1:9/v1/metrics").shutdown()  # its modules imported
    _sdk.jitter_from_own_stream()
    drawing = [sys.modules[name] for name in _sdk.JITTER_MODULES if hasattr(sys.modules.get(name), "random")]
    assert all(module.random is STREAM for module in drawing)
    assert _sdk.jitter_from_own_stream() == []  # once is enough
    if _sdk.version_of("opentelemetry-exporter-otlp-proto-http") >= (1, 35):  # the releases that draw it
        assert drawing
        random.seed(5)
        expected = random.random()
        random.seed(5)
        for module in drawing:
            module.random.uniform(0.8, 1.2)
        assert random.random() == expected


def test_readable_span_reads_the_fields_fastspan_fills() -> None:
    """ReadableSpan's public constructor sets exactly the fields listed, and its properties read them back."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan

    span = ReadableSpan("n", resource=Resource.create({}), attributes={"k": 1}, start_time=1, end_time=2)
    assert set(vars(span)) == set(_sdk.READABLE_SPAN_FIELDS)
    assert (span.name, span.attributes["k"], span.start_time, span.end_time) == ("n", 1, 1, 2)


def test_the_public_fallback_keys_equal_the_private_ones() -> None:
    """The context keys found through the public API are the API's own private ones (so the fallback is exact)."""
    from lens_rl.propagation import public_keys

    private, public = _sdk.context_keys(), public_keys()
    assert private[:4] == public[:4]


def test_opentelemetry_and_wrapt_are_required_as_ranges() -> None:
    """setup.cfg pins nothing exactly in the base dependencies or the aiohttp and grpc extras (an exact pin
    downgrades the OpenTelemetry a framework brought): the core is >=1.33,<2, the contrib a range from the
    release that pairs with 1.33, wrapt >=1.14 without 2.2.0."""
    import configparser
    import re
    from pathlib import Path

    cfg = configparser.ConfigParser()
    cfg.read(Path(__file__).parents[2] / "setup.cfg")
    extras = cfg["options.extras_require"]
    lines = [
        line.strip()
        for block in (cfg["options"]["install_requires"], extras["aiohttp"], extras["grpc"])
        for line in block.strip().splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    assert not [line for line in lines if "==" in line]
    requirement = {re.split(r"[<>=!~;\[ ]", line, maxsplit=1)[0]: line for line in lines}
    for name in ("opentelemetry-api", "opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-http"):
        assert requirement[name] == f"{name}>=1.33,<2"
    assert requirement["opentelemetry-exporter-otlp-proto-grpc"] == "opentelemetry-exporter-otlp-proto-grpc>=1.33,<2"
    assert requirement["opentelemetry-instrumentation-aiohttp-client"].endswith(">=0.54b0,<1")
    assert requirement["wrapt"] == "wrapt>=1.14,!=2.2.0"
