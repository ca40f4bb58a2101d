"""vLLM's request spans of one file: the few numbers each keeps, and a process's part of them.

vLLM traces each finished request as an ``llm_request`` span (its own scope, ``vllm.tracing.otel``)
with ``gen_ai.*`` attributes: ``gen_ai.latency.e2e``, ``.time_in_queue``, ``.time_to_first_token``,
``.time_in_model_prefill``, ``.time_in_model_decode`` (seconds) and ``gen_ai.usage.completion_tokens``
(or ``output_tokens``). Reading a file keeps those few numbers per request span
(:func:`request_numbers`, sparse beside the columns; a value that is no plausible number is skipped and
counted, as an implausible span time is); :func:`requests_part` makes a process's
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
from lens_rl.store import TIME_MAX_NS, TIME_MIN_NS

__all__ = ["REQUEST_SPAN", "SECONDS_MAX", "TOKENS_MAX", "request_numbers", "requests_part"]

#: The name of vLLM's per-request span.
REQUEST_SPAN = "llm_request"
#: A plausible request's seconds stay below this: the plausible span times' range (2000 to 2200); a longer one
#: is skipped and counted, as an implausible span time is.
SECONDS_MAX = (TIME_MAX_NS - TIME_MIN_NS) / 1e9
#: A plausible token count stays below this (the bound every ``gen_ai.usage`` count read has).
TOKENS_MAX = 1e15
_E2E, _QUEUE, _TTFT = "gen_ai.latency.e2e", "gen_ai.latency.time_in_queue", "gen_ai.latency.time_to_first_token"
_PREFILL, _DECODE = "gen_ai.latency.time_in_model_prefill", "gen_ai.latency.time_in_model_decode"
_OUTPUT = ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens")


def _number(value: Any, bound: float) -> float:
    """A finite number from 0 up to ``bound`` (excluded), else NaN (left out of sums and quantiles)."""
    if type(value) in (int, float) and 0 <= value < bound:
        return float(value)
    return math.nan


def request_numbers(attrs: Mapping[str, Any]) -> tuple[float, ...] | None:
    """(e2e, queue, ttft, prefill, decode, output tokens, values skipped) of a request span's attributes; None
    when it carries no end-to-end latency as a number (not vLLM's request span). A value that is there but no
    plausible number (text, negative, not finite, past :data:`SECONDS_MAX` seconds or :data:`TOKENS_MAX`
    tokens) is NaN, and counted in the last figure."""
    e2e = attrs.get(_E2E)
    if type(e2e) not in (int, float):
        return None
    given = [e2e, *(attrs.get(k) for k in (_QUEUE, _TTFT, _PREFILL, _DECODE))]
    numbers = [_number(value, SECONDS_MAX) for value in given]
    output = next((attrs[k] for k in _OUTPUT if attrs.get(k) is not None), None)
    numbers.append(_number(output, TOKENS_MAX))
    skipped = sum(
        1 for value, number in zip((*given, output), numbers, strict=True) if value is not None and number != number
    )
    return (*numbers, float(skipped))


def requests_part(
    found: Mapping[int, tuple[float, ...]], starts: Sequence[int], ends: Sequence[int]
) -> RequestsPart | None:
    """A process's :class:`~lens_rl.offline.read.parts.RequestsPart` from the numbers kept per row (``found``: row -> numbers) and the
    rows' start and end ns; None when it has no request span."""
    if not found:
        return None
    part = RequestsPart()
    spans = []
    for row, (e2e, queue, ttft, prefill, decode, output, skipped) in sorted(found.items()):
        part.skipped += int(skipped)
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
