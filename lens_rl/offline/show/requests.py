"""vLLM's requests for people: the goodput table's requests section, from the report's ``requests`` rows
(:mod:`lens_rl.offline.rollup.requests`); nothing without request spans. The HTML report's requests figure
is with its other figures (:func:`lens_rl.offline.show.report.figures.requests_figure`).

Example::

    print("\n".join(format_requests(report)))
"""

from __future__ import annotations

from lens_rl.offline.rollup.schema import GoodputReport

__all__ = ["format_requests"]


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def format_requests(report: GoodputReport) -> list[str]:
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
    skipped = sum(r.get("skipped_values", 0) for r in rows)
    if skipped:
        lines.append(f"  ({skipped} value(s) of the requests skipped: no plausible number)")
    return lines
