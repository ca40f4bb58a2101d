"""The one sampling rule, for phases, the job root and third-party spans alike.

``sample_rate`` samples per *top-level phase*: a span with no parent, or with the job root as its parent,
is kept with probability ``sample_rate``; a child follows its parent; the job root ``rl.job`` is always
kept. (A ratio on the trace id would keep a whole job, one trace, or none of it.) The draw comes from
lens_rl's own random stream (:mod:`lens_rl.export.ids`), never the job's ``random``. lens_rl's phases apply
it in :class:`~lens_rl.export.fastspan.FastSpanFactory`; every other span through the SDK's sampler,
:class:`PhaseSampler`: the same function decides.

Example::

    keep("generation", parent_span_context, root_span_id, 0.1)   # True about one time in ten
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult

from lens_rl.export.ids import random_float

__all__ = ["ALWAYS_KEPT", "PhaseSampler", "keep"]

#: Spans kept whatever the rate: the job root and the attempt's launch (one each per attempt).
ALWAYS_KEPT = frozenset({"rl.job", "launch"})


def keep(name: str, parent: Any, root_span_id: int | None, rate: float) -> bool:
    """Whether a span named ``name`` under ``parent`` (a SpanContext, maybe invalid) is sampled."""
    if rate >= 1.0 or name in ALWAYS_KEPT:
        return True
    if parent[0] and parent[1] and parent[1] != root_span_id:  # (a SpanContext is a tuple: is_valid, span_id)
        return bool(parent.trace_flags.sampled)  # a child follows its parent
    return random_float() < rate  # lens_rl's own stream: the job's random is never advanced


class PhaseSampler(Sampler):
    """The SDK's view of :func:`keep` (third-party spans, and phases when lens_rl records SDK spans)."""

    def __init__(self, rate: float, root_span_id: Callable[[], int | None]) -> None:
        self._rate = rate
        self._root_span_id = root_span_id

    def should_sample(
        self,
        parent_context: Any,
        trace_id: int,
        name: str,
        kind: Any = None,
        attributes: Any = None,
        links: Any = None,
        trace_state: Any = None,
    ) -> SamplingResult:
        parent = trace_api.get_current_span(parent_context).get_span_context()
        if keep(name, parent, self._root_span_id(), self._rate):
            return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes)
        return SamplingResult(Decision.DROP)

    def get_description(self) -> str:
        return f"lens_rl.PhaseSampler{{{self._rate}}}"
