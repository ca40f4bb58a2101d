"""vLLM's requests rolled up per worker group: does generation wait on the queue or on compute?

:func:`requests_rows` rolls each process's :class:`~lens_rl.offline.read.parts.RequestsPart` (its vLLM
``llm_request`` spans' numbers, :mod:`lens_rl.offline.read.requests`) up into the report's ``requests``
rows, one per worker group:

``requests`` (count), ``e2e_p50_s`` / ``e2e_p95_s``, ``queue_share`` (time in queue over end-to-end
time, summed) and ``queue_p95_s``, ``ttft_p50_s`` / ``ttft_p95_s``, ``prefill_s`` / ``decode_s``
(summed over requests), ``output_tokens`` and ``output_tokens_per_s``: output tokens over the wall
time in which at least one request was in flight (the group's generation rate while it generates);
``skipped_values``: how many of its requests' values were no plausible number (text, negative, not finite,
seconds past the plausible span times' range, tokens past 10^15), each left out of its figures. Quantiles
are nearest-rank, exact.

Example::

    rows = requests_rows(parts)          # [] when no process has vLLM request spans
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from lens_rl.offline.read.intervals import pairs
from lens_rl.offline.read.parts import RequestsPart

__all__ = ["requests_rows"]


def _quantile(values: Iterable[float], q: float) -> float | None:
    ordered = sorted(v for v in values if v == v)
    if not ordered:
        return None
    return round(ordered[max(math.ceil(q * len(ordered)) - 1, 0)], 6)


def requests_rows(processes: Iterable[Any]) -> list[dict[str, Any]]:
    """The report's ``requests`` rows: one per worker group whose processes hold request spans (``part.requests``
    of :class:`~lens_rl.offline.read.parts.ProcessPart`), sorted by group."""
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
                "skipped_values": part.skipped,
            }
        )
    return rows
