"""The one home of OpenTelemetry's private names: the pinned versions, every name found, the ReadableSpan
fields FastSpan fills as the SDK reads them. This fails loudly when OpenTelemetry is upgraded: check each
name in lens_rl/export/_sdk.py against the new release, then update PINNED."""

from __future__ import annotations

from lens_rl.export import _sdk


def test_opentelemetry_is_the_pinned_set() -> None:
    """The installed OpenTelemetry distributions are the versions _sdk.py's private names were read from."""
    assert _sdk.installed_versions() == _sdk.PINNED


def test_every_private_name_is_found() -> None:
    """No fallback is in use with the pinned versions: every private name _sdk.py reads exists."""
    from opentelemetry.sdk.trace import TracerProvider

    assert _sdk.span_fan_out(TracerProvider()) is not None
    assert _sdk.missing() == []


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
