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

__all__ = ["COLUMNS", "GPU_RANK_ROWS", "cells", "gpu_lines", "memory", "shown_ranks", "unread"]

#: rank rows shown (past it, the ranks whose GPUs were busy least)
GPU_RANK_ROWS = 16


def memory(value: object) -> str:
    """Bytes as GiB to the tenth (``-`` for none)."""
    return f"{value / 2**30:.1f}G" if isinstance(value, (int, float)) else "-"


def _busy(value: object) -> str:
    return "unavailable" if value is None else percent(value)


#: a GPU row's figures: their headings and widths in the table
COLUMNS = (("gpu busy", 12), ("idle", 10), ("idle%", 8), ("mem", 9), ("SM", 8), ("tensor", 8))


def cells(row: Any) -> tuple[str, ...]:
    """A GPU row's figures as shown (:data:`COLUMNS`' order): busy (``unavailable`` where no reading), idle
    seconds, idle share, memory peak, SM and tensor activity."""
    idle = "-" if row["gpu_idle_s"] is None else wall(row["gpu_idle_s"])
    return (
        _busy(row["gpu_busy"]),
        idle,
        percent(row["gpu_idle_share"]),
        memory(row["mem_peak_bytes"]),
        percent(row["sm_active"]),
        percent(row["tensor_active"]),
    )


def shown_ranks(ranks: list[Any]) -> tuple[list[Any], str]:
    """The rank rows shown (all of them, or the :data:`GPU_RANK_ROWS` whose GPUs were busy least) and what the
    heading says of it."""
    if len(ranks) <= GPU_RANK_ROWS:
        return ranks, ""
    least = sorted(ranks, key=lambda r: r["gpu_busy"] or 0.0)[:GPU_RANK_ROWS]
    return least, f" (the {GPU_RANK_ROWS} least busy of {len(ranks)})"


def _figures(row: Any) -> str:
    return "".join(f"{cell:>{width}s}" for cell, (_name, width) in zip(cells(row), COLUMNS, strict=True))


_COLUMNS = "".join(f"{name:>{width}s}" for name, width in COLUMNS)


def gpu_lines(report: Any) -> list[str]:
    """The GPU block (no lines where the run has no GPU samples)."""
    gpu = report.get("gpu")
    if not gpu:
        return []
    good = gpu["goodput"]
    picked = report.get("selection")  # (--steps A-B: every GPU figure covers those steps)
    over = "wall's" if picked is None else "steps'"
    lines = [
        "",
        f"GPU goodput {percent(good['goodput'])} (busy GPU-seconds in productive phases over the "
        f"{over} {good['gpu_s']:.2f} GPU-seconds, {good['devices']} GPUs; the "
        f"clock's: {percent(report['goodput'])})",
        f"{'GPU by phase':30s}{'group':>16s}{'bucket':>12s}{'total':>11s}" + _COLUMNS,
        "  (gpu busy: time-weighted utilisation while the phase ran; idle: seconds its GPUs read 0 %, summed as",
        "   total is; mem: peak memory used; SM, tensor: activity where the GPU reports it)",
    ]
    for row in gpu["phases"]:
        lines.append(
            f"{str(row['phase'])[:29]:30s}{str(row['worker_group'])[:15]:>16s}{str(row['bucket'] or '-'):>12s}"
            f"{row['total_s']:10.2f}s" + _figures(row)
        )
    shown, note = shown_ranks(gpu["ranks"])
    if shown:
        lines.append(f"{'GPU by rank' + note:58s}{'':11s}" + _COLUMNS)
    for row in shown:
        label = f"  {row['worker_group']} rank {row['rank']} ({', '.join(row['devices'])[:30]})"
        lines.append(f"{label[:68]:69s}" + _figures(row))
    lines += [f"  {line}" for line in unread(gpu)]
    return lines


def unread(gpu: Any) -> list[str]:
    """A line for each device with no utilisation reading (flagged unavailable, or none read)."""
    return [
        f"GPU {d['uuid']} on {d['host'] or '?'}: {'flagged unavailable' if d['unavailable'] else 'no utilisation reading'}"
        for d in gpu["devices"]
        if d["gpu_busy"] is None
    ]
