"""vLLM's requests rolled up per worker group: does generation wait on the queue or on compute?

vLLM traces each finished request as an ``llm_request`` span (its own scope, ``vllm.tracing.otel``)
with ``gen_ai.*`` attributes: ``gen_ai.latency.e2e``, ``.time_in_queue``, ``.time_to_first_token``,
``.time_in_model_prefill``, ``.time_in_model_decode`` (seconds) and ``gen_ai.usage.completion_tokens``
(or ``output_tokens``). Reading a file keeps those few numbers per request span
(:func:`request_numbers`, sparse beside the columns); a process's :class:`RequestsPart` holds them,
merges exactly in any order (files, parallel workers, refresh); :func:`requests_rows` rolls them up
into the report's ``requests`` rows, one per worker group:

``requests`` (count), ``e2e_p50_s`` / ``e2e_p95_s``, ``queue_share`` (time in queue over end-to-end
time, summed) and ``queue_p95_s``, ``ttft_p50_s`` / ``ttft_p95_s``, ``prefill_s`` / ``decode_s``
(summed over requests), ``output_tokens`` and ``output_tokens_per_s``: output tokens over the wall
time in which at least one request was in flight (the group's generation rate while it generates).
Quantiles are nearest-rank, exact.

Example::

    rows = requests_rows(parts)          # [] when no process has vLLM request spans
    print(format_requests(report))      # the table's section (the report's figure: report/figures.py)
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lens_rl.offline.intervals import merge_intervals, merge_packed, pack, pairs

__all__ = [
    "REQUEST_SPAN",
    "RequestsPart",
    "format_requests",
    "request_numbers",
    "requests_part",
    "requests_rows",
]

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


@dataclass
class RequestsPart:
    """One process's requests: their latencies (seconds, one array each), summed prefill / decode seconds and
    output tokens, and the union of their spans' intervals (packed ns). Exact and mergeable."""

    e2e: array = field(default_factory=lambda: array("d"))
    queue: array = field(default_factory=lambda: array("d"))
    ttft: array = field(default_factory=lambda: array("d"))
    prefill_s: float = 0.0
    decode_s: float = 0.0
    output_tokens: float = 0.0
    busy: array = field(default_factory=lambda: array("q"))

    @property
    def count(self) -> int:
        return len(self.e2e)

    def merge(self, other: RequestsPart) -> None:
        """Fold another part of the same process in."""
        self.e2e.extend(other.e2e)
        self.queue.extend(other.queue)
        self.ttft.extend(other.ttft)
        self.prefill_s += other.prefill_s
        self.decode_s += other.decode_s
        self.output_tokens += other.output_tokens
        self.busy = merge_packed(self.busy, other.busy)


def requests_part(
    found: Mapping[int, tuple[float, ...]], starts: Sequence[int], ends: Sequence[int]
) -> RequestsPart | None:
    """A process's :class:`RequestsPart` from the numbers kept per row (``found``: row -> numbers) and the
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


def _quantile(values: Iterable[float], q: float) -> float | None:
    ordered = sorted(v for v in values if v == v)
    if not ordered:
        return None
    return round(ordered[max(math.ceil(q * len(ordered)) - 1, 0)], 6)


def requests_rows(processes: Iterable[Any]) -> list[dict[str, Any]]:
    """The report's ``requests`` rows: one per worker group whose processes hold request spans (``part.requests``
    of :class:`~lens_rl.offline.parts.ProcessPart`), sorted by group."""
    groups: dict[str, RequestsPart] = {}
    for process in processes:
        part = getattr(process, "requests", None)
        if part is None or not part.count:
            continue
        mine = groups.get(process.key.group)
        if mine is None:
            mine = groups[process.key.group] = RequestsPart()
        mine.merge(part)
    rows = []
    for group in sorted(groups):
        part = groups[group]
        e2e_sum = sum(v for v in part.e2e if v == v)
        queue_sum = sum(v for v in part.queue if v == v)
        busy_s = sum(end - start for start, end in pairs(part.busy)) / 1e9
        rows.append(
            {
                "worker_group": group,
                "requests": part.count,
                "e2e_p50_s": _quantile(part.e2e, 0.5),
                "e2e_p95_s": _quantile(part.e2e, 0.95),
                "queue_share": round(queue_sum / e2e_sum, 6) if e2e_sum > 0 else None,
                "queue_p95_s": _quantile(part.queue, 0.95),
                "ttft_p50_s": _quantile(part.ttft, 0.5),
                "ttft_p95_s": _quantile(part.ttft, 0.95),
                "prefill_s": round(part.prefill_s, 6),
                "decode_s": round(part.decode_s, 6),
                "output_tokens": part.output_tokens,
                "busy_s": round(busy_s, 6),
                "output_tokens_per_s": round(part.output_tokens / busy_s, 3) if busy_s > 0 else None,
            }
        )
    return rows


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def format_requests(report: Mapping[str, Any]) -> list[str]:
    """The table's requests section (no lines without request spans)."""
    rows = report.get("requests") or []
    if not rows:
        return []
    lines = [
        "",
        "requests (vLLM's llm_request spans): end to end, time in queue, time to first token (s)",
        f"{'  group':20s}{'requests':>9s}{'e2e p50':>9s}{'p95':>8s}{'queue':>8s}{'q p95':>8s}"
        f"{'ttft p50':>9s}{'p95':>8s}{'prefill':>9s}{'decode':>9s}{'out tok/s':>11s}",
    ]
    for r in rows:
        share = "-" if r["queue_share"] is None else f"{r['queue_share'] * 100:.1f}%"
        rate = "-" if r["output_tokens_per_s"] is None else f"{r['output_tokens_per_s']:.1f}"
        lines.append(
            f"  {str(r['worker_group'])[:17]:18s}{r['requests']:>9d}{_secs(r['e2e_p50_s']):>9s}{_secs(r['e2e_p95_s']):>8s}"
            f"{share:>8s}{_secs(r['queue_p95_s']):>8s}{_secs(r['ttft_p50_s']):>9s}{_secs(r['ttft_p95_s']):>8s}"
            f"{r['prefill_s']:9.2f}{r['decode_s']:9.2f}{rate:>11s}"
        )
    return lines
