"""The span twins: the no-op span off and the recording one on have the same methods, and neither raises where the other accepts."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

import lens_rl
from lens_rl import testing, traced_phase
from lens_rl.record.spans import NoopSpan, PhaseSpan, SpanLike
from lens_rl.testing import SpanRecorder


def _public_methods(cls: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(getattr(cls, name))
        for name in dir(cls)
        if not name.startswith("_") and callable(getattr(cls, name))
    }


ODD_CALLS: list[tuple[str, tuple[Any, ...]]] = [
    ("set_attribute", ("k", object())),
    ("set_attribute", (None, [1, "a"])),
    ("set_attributes", ([("a", 1)],)),
    ("set_attributes", ("not a mapping",)),
    ("set_attributes", (None,)),
    ("add_event", ("e", [("a", 1)])),
    ("add_event", (None, None, "not a time")),
    ("add_link", ("not a context",)),
    ("record_exception", ("a string",)),
    ("record_exception", (ValueError("v"),)),
    ("set_status", ("bogus",)),
    ("update_name", ("",)),
    ("update_name", (None,)),
    ("is_recording", ()),
    ("get_span_context", ()),
]


def test_the_noop_span_is_the_recording_spans_twin() -> None:
    """The no-op and recording span objects implement the same SpanLike methods with the same signatures."""
    protocol = {name for name in dir(SpanLike) if not name.startswith("_")}
    noop, real = _public_methods(NoopSpan), _public_methods(PhaseSpan)
    assert set(noop) == set(real) == protocol
    assert all(noop[name] == real[name] for name in noop), {n: (noop[n], real[n]) for n in noop if noop[n] != real[n]}
    assert "__getattr__" not in vars(PhaseSpan) and "__getattr__" not in vars(NoopSpan)


@pytest.mark.parametrize(("method", "args"), ODD_CALLS)
def test_neither_span_raises_on_what_the_other_accepts(method: str, args: tuple[Any, ...]) -> None:
    """Every span method accepts the same odd arguments on and off, without raising."""
    with traced_phase("off_phase") as off_span:
        getattr(off_span, method)(*args)
    with testing.recording():
        with traced_phase("on_phase") as on_span:
            assert isinstance(on_span, PhaseSpan) and isinstance(on_span, SpanLike)
            getattr(on_span, method)(*args)


def test_yielded_span_exposes_the_otel_span_api(lens_spans: SpanRecorder) -> None:
    """The yielded span gives its context and forwards the rest of the OTel span API."""
    with traced_phase("generation") as span:
        ctx = span.get_span_context()
        span.update_name("generation.v2")
    assert ctx.is_valid and lens_spans.find("generation.v2").context.span_id == ctx.span_id
    lens_rl.testing.reset()
    with traced_phase("generation") as off:
        assert not off.get_span_context().is_valid and not off.is_recording()
