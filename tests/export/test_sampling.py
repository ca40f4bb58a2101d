"""The one sampling rule: the job root always kept, a top-level phase with probability sample_rate, a child
following its parent; the SDK's sampler says the same."""

from __future__ import annotations

from opentelemetry.trace import INVALID_SPAN_CONTEXT, NonRecordingSpan, SpanContext, TraceFlags, set_span_in_context

from lens_rl.export.sampling import PhaseSampler, keep

ROOT = 0xAAAA


def _parent(span_id: int, sampled: bool) -> SpanContext:
    return SpanContext(0x1234, span_id, is_remote=False, trace_flags=TraceFlags(1 if sampled else 0))


def test_the_rule() -> None:
    """rl.job is kept at rate 0; so is anything at rate 1; a child of a sampled (or unsampled) parent follows
    it; a child of the job root, or a span with no parent, is a top-level phase: kept at the rate."""
    assert keep("rl.job", INVALID_SPAN_CONTEXT, None, 0.0) and keep("x", INVALID_SPAN_CONTEXT, None, 1.0)
    assert keep("child", _parent(7, True), ROOT, 0.0) and not keep("child", _parent(7, False), ROOT, 1.0 - 1e-9)
    assert not keep("top", _parent(ROOT, True), ROOT, 0.0) and not keep("top", INVALID_SPAN_CONTEXT, ROOT, 0.0)
    kept = sum(keep("top", _parent(ROOT, True), ROOT, 0.3) for _ in range(4000))
    assert 900 < kept < 1500  # ~30 % of top-level phases


def test_the_sdk_sampler_applies_the_same_rule() -> None:
    """PhaseSampler's decisions are keep()'s, read from the parent context."""
    sampler = PhaseSampler(0.0, lambda: ROOT)
    under = set_span_in_context(NonRecordingSpan(_parent(7, True)))
    assert sampler.should_sample(under, 0x1234, "library").decision.is_sampled()
    assert not sampler.should_sample(None, 0x1234, "library").decision.is_sampled()
    assert sampler.should_sample(None, 0x1234, "rl.job").decision.is_sampled()
