"""vLLM's request spans of one file: the few numbers each keeps, and a process's part of them.

vLLM traces each finished request as an ``llm_request`` span (its own scope, ``vllm.tracing.otel``)
with ``gen_ai.*`` attributes: ``gen_ai.latency.e2e``, ``.time_in_queue``, ``.time_to_first_token``,
``.time_in_model_prefill``, ``.time_in_model_decode`` (seconds) and ``gen_ai.usage.completion_tokens``
(or ``output_tokens``). Reading a file keeps those few numbers per request span
(:func:`request_numbers`, sparse beside the columns); :func:`requests_part` makes a process's
:class:`~lens_rl.offline.read.parts.RequestsPart` of them, which merges exactly in any order (files,
parallel workers, refresh). The report's ``requests`` rows are :mod:`lens_rl.offline.rollup.requests`'s.

Example::

    numbers = request_numbers(attrs)     # None: not vLLM's request span
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from lens_rl.offline.read.intervals import merge_intervals, pack
from lens_rl.offline.read.parts import RequestsPart

__all__ = ["REQUEST_SPAN", "request_numbers", "requests_part"]

#: The name of vLLM's per-request span.
REQUEST_SPAN = "llm_request"
_E2E, _QUEUE, _TTFT = "gen_ai.latency.e2e", "gen_ai.latency.time_in_queue", "gen_ai.latency.time_to_first_token"
_PREFILL, _DECODE = "gen_ai.latency.time_in_model_prefill", "gen_ai.latency.time_in_model_decode"
_OUTPUT = ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens")


def _number(value: Any) -> float:
    """A finite, non-negative number, else NaN (left out of sums and quantiles)."""
    if type(value) in (int, float) and math.isfinite(value) and value >= 0:
        return float(value)
    return math.nan


def request_numbers(attrs: Mapping[str, Any]) -> tuple[float, ...] | None:
    """(e2e, queue, ttft, prefill, decode, output tokens) of a request span's attributes; None when it
    carries no end-to-end latency (not vLLM's request span)."""
    e2e = _number(attrs.get(_E2E))
    if e2e != e2e:
        return None
    output = next((attrs[k] for k in _OUTPUT if k in attrs), None)
    return (e2e, *(_number(attrs.get(k)) for k in (_QUEUE, _TTFT, _PREFILL, _DECODE)), _number(output))


def requests_part(
    found: Mapping[int, tuple[float, ...]], starts: Sequence[int], ends: Sequence[int]
) -> RequestsPart | None:
    """A process's :class:`~lens_rl.offline.read.parts.RequestsPart` from the numbers kept per row (``found``: row -> numbers) and the
    rows' start and end ns; None when it has no request span."""
    if not found:
        return None
    part = RequestsPart()
    spans = []
    for row, (e2e, queue, ttft, prefill, decode, output) in sorted(found.items()):
        part.e2e.append(e2e)
        part.queue.append(queue)
        part.ttft.append(ttft)
        part.prefill_s += prefill if prefill == prefill else 0.0
        part.decode_s += decode if decode == decode else 0.0
        part.output_tokens += output if output == output else 0.0
        start, end = starts[row], ends[row]
        if end > start:
            spans.append((start, end))
    part.busy = pack(merge_intervals(spans))
    return part
