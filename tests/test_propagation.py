"""Propagation: W3C carriers for every hop, the caller's bucket and step in the baggage, the context keys."""

from __future__ import annotations

import lens_rl
from lens_rl import traced_phase, with_bucket
from lens_rl.testing import recording


def test_the_bucket_and_step_travel_in_the_carrier() -> None:
    """inject_context inside with_bucket carries the bucket and step; a phase entered under it resolves them,
    and a local with_bucket or an explicit bucket still wins."""
    with recording() as rec:
        with traced_phase("step", step=7):
            with with_bucket("overhead"):
                validation = lens_rl.inject_context()
            training = lens_rl.inject_context()
        assert "rl.bucket=overhead" in validation["baggage"] and "rl.step=7" in validation["baggage"]
        assert "rl.bucket" not in training.get("baggage", "")  # a phase's own bucket is not carried
        with lens_rl.attach_context(validation):
            with traced_phase("generation"):
                pass
            with traced_phase("generation", bucket="wasted"):
                pass
            with with_bucket("idle"), traced_phase("generation"):
                pass
        with traced_phase("generation", parent=training, step=9):
            pass
        gens = [(s.attributes.get("rl.bucket"), s.attributes.get("rl.step")) for s in rec.find_all("generation")]
    assert gens == [("overhead", 7), ("wasted", 7), ("idle", 7), ("productive", 9)]


def test_carriers_round_trip_and_bad_ones_are_none() -> None:
    """A carrier made by inject_context extracts to the same span context (case-insensitive keys); an empty,
    malformed or traceparent-less carrier is no context; off, inject_context gives {} and attach_context is
    a no-op."""
    from opentelemetry import trace

    from lens_rl.propagation import extract

    assert lens_rl.inject_context() == {}
    with lens_rl.attach_context({"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}):
        pass
    with recording():
        with traced_phase("step", step=3):
            carrier = lens_rl.inject_context()
            here = trace.get_current_span().get_span_context()
        ctx = extract({k.upper(): v for k, v in carrier.items()})
        assert trace.get_current_span(ctx).get_span_context().span_id == here.span_id
    for bad in (None, {}, {"baggage": "rl.step=1"}, {"traceparent": "garbage"}):
        assert extract(bad) is None


def test_the_context_keys_are_found_publicly_until_the_sdk_hands_them_in() -> None:
    """Before any handle, keys() serves the public API's keys; they are the ones a handle hands in."""
    from lens_rl._runtime import RUNTIME
    from lens_rl.propagation import keys, public_keys

    saved = RUNTIME.otel_keys
    try:
        RUNTIME.otel_keys = None
        found = keys()
        assert found[:4] == public_keys()[:4] and RUNTIME.otel_keys is found
    finally:
        RUNTIME.otel_keys = saved
