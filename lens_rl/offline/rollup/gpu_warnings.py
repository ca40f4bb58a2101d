"""The GPU warnings of a look (``--json`` ``warnings``, the table, the page), from the GPU rollup's rows
(:mod:`lens_rl.offline.rollup.gpu`):

* ``gpu_idle_in_productive``: a productive phase whose devices read idle more than :data:`IDLE_SHARE` of its
  measured time (generation waiting on a reward server);
* ``gpu_idle_gap``: stretches of :data:`GAP_S` or more where every device of a group read idle while the
  group ran, named by the phases on either side (the gap between generation and training), the longest
  :data:`MOST_GAPS` pairs per group;
* ``gpu_unavailable``: a device flagged unavailable, or with no utilisation counter or reading (its figures
  are null, never 0 %).

Example::

    warnings = idle_in_productive(phase_rows) + idle_gaps(groups, idle) + unavailable(devices, users, read)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from lens_rl.offline.read.intervals import intersected

__all__ = ["GAP_S", "IDLE_SHARE", "MOST_GAPS", "idle_gaps", "idle_in_productive", "unavailable"]

#: a productive phase whose devices read idle past this share of its measured time is named
IDLE_SHARE = 0.2
#: a stretch at least this long (s) where every device of a group read idle is named
GAP_S = 2.0
#: at most this many (phase before, phase after) pairs named per group
MOST_GAPS = 20


def idle_in_productive(phases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``gpu_idle_in_productive``: each productive phase row whose devices read idle past :data:`IDLE_SHARE`."""
    out = []
    for row in phases:
        share = row["gpu_idle_share"]
        if row["bucket"] == "productive" and share is not None and share > IDLE_SHARE:
            out.append(
                {
                    "kind": "gpu_idle_in_productive",
                    "message": f"{row['phase']} ({row['worker_group']}) is productive by the clock, but its GPUs "
                    f"read idle {share:.0%} of its time ({row['gpu_idle_s']:.1f} s): waiting on something?",
                    "phase": row["phase"],
                    "bucket": row["bucket"],
                    "worker_group": row["worker_group"],
                    "share": share,
                    "gpu_idle_s": row["gpu_idle_s"],
                }
            )
    return out


def idle_gaps(groups: Mapping[str, list[tuple[Any, Any]]], idle_of: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``gpu_idle_gap`` warnings: per group, the stretches where every one of its devices read idle while the
    group ran, by the phases on either side: on each side the innermost span running at the stretch's edge,
    else the one nearest it (the one the stretch lies in on both sides where it lies in one). A group with a
    device of no reading at all (its host's sample file lost) has none: unknown is never idle."""
    out = []
    for group, members in sorted(groups.items()):
        uuids = sorted({u for _key, cols in members for u in cols[0]})
        spans = [cols for _key, cols in members if cols[1].size]
        if not uuids or not spans or not all(u in idle_of for u in uuids):
            continue
        idle = [(min(int(c[1].min()) for c in spans), max(int(c[2].max()) for c in spans))]
        for uuid in uuids:
            # (a stretch of GAP_S or more where all read idle lies in one of each device's that long: only
            # those are intersected, the same stretches found, no pass over a day's short ones)
            stretches = idle_of[uuid]
            idle = intersected(idle, stretches[~(stretches[:, 1] - stretches[:, 0] < GAP_S * 1e9)].tolist())
            if not idle:
                break
        long = [(lo, hi) for lo, hi in idle if not hi - lo < GAP_S * 1e9]
        if not long:  # (most groups: no stretch to name, the group's spans not gathered)
            continue
        starts = np.concatenate([c[1] for c in spans])
        ends = np.concatenate([c[2] for c in spans])
        names = np.concatenate([np.array([str(k[0]) for k in c[3]], dtype=object)[c[4]] for c in spans])
        found: dict[tuple[str, str], list[float]] = {}
        for lo, hi in long:
            before, after = starts < lo, ends > hi
            name_before = (
                str(names[_innermost(starts, ends, before, np.minimum(ends, lo))]) if before.any() else "start"
            )
            name_after = str(names[_innermost(starts, ends, after, -np.maximum(starts, hi))]) if after.any() else "end"
            got = found.setdefault((name_before, name_after), [0, 0.0, 0.0, lo / 1e9])
            got[0] += 1
            got[1] += float(hi - lo) / 1e9
            got[2] = max(got[2], float(hi - lo) / 1e9)
        for (name_before, name_after), (count, total, longest, first) in sorted(
            found.items(), key=lambda item: -item[1][1]
        )[:MOST_GAPS]:
            where = f"during {name_before}" if name_before == name_after else f"between {name_before} and {name_after}"
            out.append(
                {
                    "kind": "gpu_idle_gap",
                    "message": f"every GPU of {group} read idle {where}: "
                    f"{int(count)} stretch(es) of {GAP_S:g} s or more, {total:.1f} s in all (longest {longest:.1f} s)",
                    "worker_group": group,
                    "between": [name_before, name_after],
                    "gaps": int(count),
                    "gap_s": round(total, 6),
                    "longest_s": round(longest, 6),
                    "first_at_s": round(float(first), 6),
                }
            )
    return out


def _innermost(starts: Any, ends: Any, mask: Any, near: Any) -> int:
    """The span of ``mask`` nearest the gap (``near`` largest: its end, or its start negated, clipped to the
    gap's edge: one running at the edge is nearest), and inside it, again and again, the one of ``mask`` nearest
    among the spans it holds: the phase at the gap's edge, or the one the gap lies in, not a step's umbrella
    around it (an umbrella ends with its last phase, the next starts with, or a moment before, its first)."""
    mask = mask.copy()
    while True:
        where = np.flatnonzero(mask)
        at = int(where[np.argmax(near[where])])
        mask[at] = False
        mask &= (starts >= starts[at]) & (ends <= ends[at])  # (the spans it holds; fewer each time: it ends)
        if not mask.any():
            return at


def unavailable(
    devices: Mapping[str, Any],
    users: Mapping[str, Any],
    util_read: set[str],
    unread: Mapping[str, tuple[float, float]] | None = None,
) -> list[dict[str, Any]]:
    """``gpu_unavailable``: a device flagged unavailable, or with no utilisation reading at all, or (``unread``:
    uuid -> seconds, share) without one for a large part of its processes' time (its sampler stopped, the GPU
    was lost): figures there come from the time read, never 0 % for the rest."""
    out = []
    unread = unread or {}
    for uuid, device in devices.items():
        then = "its figures read null (unavailable), never 0 %"
        if device.unavailable:
            why = "reads 0 on every counter while its memory is in use"
        elif "util" not in device.has:
            why = "has no utilisation counter"
        elif uuid not in util_read:
            why = "gave no utilisation reading"
        elif uuid in unread:
            seconds, share = unread[uuid]
            why = f"gave no reading for {seconds:g} s ({share:.0%}) of the time its processes ran"
            then = "its figures there come from the time it was read, never 0 % (sampling stopped? the GPU lost?)"
        else:
            continue
        row = {
            "kind": "gpu_unavailable",
            "message": f"GPU {device.uuid} ({device.name or '?'} on {device.host or '?'}) {why}: {then}",
            "uuid": device.uuid,
            "host": device.host,
            "processes": len(users.get(uuid, [])),
        }
        if uuid in unread and uuid in util_read:
            row["unread_s"], row["share"] = unread[uuid]
        out.append(row)
    return out
