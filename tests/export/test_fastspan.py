"""FastSpan: a phase's span is an SDK ReadableSpan every processor reads, started and ended through the
provider's processors (on_start too), sampled by the one rule."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import SpanProcessor

import lens_rl
from lens_rl import traced_phase
from lens_rl.testing import SpanRecorder, recording


class _Seen(SpanProcessor):
    def __init__(self) -> None:
        self.started: list[tuple[str, dict[str, Any], bool]] = []
        self.ended: list[str] = []

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self.started.append((span.name, dict(span.attributes), parent_context is not None))

    def on_end(self, span: Any) -> None:
        self.ended.append(span.name)


def test_a_processor_on_the_provider_sees_every_phase_start_and_end(lens_spans: SpanRecorder) -> None:
    """A span processor added to the handle's provider (a user's enrichment) gets on_start for phases, with
    their attributes and parent context, and on_end, in order."""
    seen = _Seen()
    lens_spans.handle.tracer_provider.add_span_processor(seen)
    with traced_phase("step", step=1), traced_phase("generation"):
        pass
    assert [s[0] for s in seen.started] == ["step", "generation"] and seen.ended == ["generation", "step"]
    assert seen.started[1][1] == {"rl.bucket": "productive", "rl.step": 1} and all(s[2] for s in seen.started)


def test_one_sampling_rule_for_phases_and_third_party_spans() -> None:
    """With sample_rate 0, a top-level phase and a top-level third-party span are both dropped, and a phase's
    child follows it; with 1, both are kept."""
    for rate, kept in ((0.0, []), (1.0, ["child", "top", "library"])):
        with recording(sample_rate=rate) as rec:
            with traced_phase("top"), traced_phase("child"):
                pass
            with rec.handle.tracer.start_as_current_span("library"):
                pass
            assert rec.names() == kept


def test_a_fastspan_is_what_the_sdk_reads() -> None:
    """Its public ReadableSpan properties: name, context, parent, attributes, status, events, resource."""
    with recording() as rec:
        with traced_phase("step", step=2):
            with traced_phase("reward") as span:
                span.add_event("scored", {"n": 3})
        reward, step = rec.find("reward"), rec.find("step")
    assert reward.parent.span_id == step.context.span_id and reward.context.trace_id == step.context.trace_id
    assert dict(reward.attributes) == {"rl.bucket": "productive", "rl.step": 2}
    assert [e.name for e in reward.events] == ["scored"] and reward.resource.attributes["rl.worker_group"] == "test"
    assert reward.status.is_unset and reward.end_time >= reward.start_time
    assert lens_rl.get_telemetry_handle() is None  # (recording() reset on the way out)
