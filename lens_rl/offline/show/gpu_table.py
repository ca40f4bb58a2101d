"""The goodput table's GPU block: the job's GPU goodput beside the clock's, then busy and idle by the device per
(group, phase) and per rank, and the devices whose readings are no readings. Shown only where the run has GPU
samples (``report["gpu"]``): a run without them prints as it always did. A figure with no reading (a counter
the device lacks, a device flagged unavailable) shows as ``unavailable``, never 0 %.

Example::

    lines += gpu_lines(report)
"""

from __future__ import annotations

from typing import Any

from lens_rl.offline.show.formats import percent, wall

__all__ = ["gpu_lines", "memory"]

#: rank rows shown (past it, the ranks whose GPUs were busy least)
GPU_RANK_ROWS = 16


def memory(value: object) -> str:
    """Bytes as GiB to the tenth (``-`` for none)."""
    return f"{value / 2**30:.1f}G" if isinstance(value, (int, float)) else "-"


def _busy(value: object) -> str:
    return "unavailable" if value is None else percent(value)


def _figures(row: Any) -> str:
    idle = "-" if row["gpu_idle_s"] is None else wall(row["gpu_idle_s"])
    return (
        f"{_busy(row['gpu_busy']):>12s}{idle:>10s}{percent(row['gpu_idle_share']):>8s}"
        f"{memory(row['mem_peak_bytes']):>9s}{percent(row['sm_active']):>8s}{percent(row['tensor_active']):>8s}"
    )


_COLUMNS = f"{'gpu busy':>12s}{'idle':>10s}{'idle%':>8s}{'mem':>9s}{'SM':>8s}{'tensor':>8s}"


def gpu_lines(report: Any) -> list[str]:
    """The GPU block (no lines where the run has no GPU samples)."""
    gpu = report.get("gpu")
    if not gpu:
        return []
    good = gpu["goodput"]
    lines = [
        "",
        f"GPU goodput {percent(good['goodput'])} (busy GPU-seconds in productive phases over the wall's "
        f"{good['gpu_s']:.2f} GPU-seconds, {good['devices']} GPUs; the clock's: {percent(report['goodput'])})",
        f"{'GPU by phase':30s}{'group':>16s}{'bucket':>12s}{'total':>11s}" + _COLUMNS,
        "  (gpu busy: time-weighted utilisation while the phase ran; idle: seconds its GPUs read 0 %, summed as",
        "   total is; mem: peak memory used; SM, tensor: activity where the GPU reports it)",
    ]
    for row in gpu["phases"]:
        lines.append(
            f"{str(row['phase'])[:29]:30s}{str(row['worker_group'])[:15]:>16s}{str(row['bucket'] or '-'):>12s}"
            f"{row['total_s']:10.2f}s" + _figures(row)
        )
    ranks = gpu["ranks"]
    shown = ranks if len(ranks) <= GPU_RANK_ROWS else sorted(ranks, key=lambda r: r["gpu_busy"] or 0.0)
    if ranks:
        note = f" (the {GPU_RANK_ROWS} least busy of {len(ranks)})" if len(ranks) > GPU_RANK_ROWS else ""
        lines.append(f"{'GPU by rank' + note:58s}{'':11s}" + _COLUMNS)
    for row in shown[:GPU_RANK_ROWS]:
        label = f"  {row['worker_group']} rank {row['rank']} ({', '.join(row['devices'])[:30]})"
        lines.append(f"{label[:68]:69s}" + _figures(row))
    for device in gpu["devices"]:
        if device["gpu_busy"] is None:
            why = "flagged unavailable" if device["unavailable"] else "no utilisation reading"
            lines.append(f"  GPU {device['uuid']} on {device['host'] or '?'}: {why}")
    return lines
