"""The pipeline's pools: each worker group's role, and what its ``rl.pool`` resource attribute says.

A group's role is ``rollout`` when most of its productive exclusive time is in generation-family phases,
``trainer`` when most is training or logprob, else ``other``; a process's ``rl.pool`` (one of :data:`ROLES`,
read as the config reads its choices: case and surrounding blanks aside) wins. Any other value cannot be
refused where it was set (a resource attribute, on a worker), so the reading side says it: one
``pool_unknown`` warning per group and value (``--json`` ``warnings``, the table, the page), and the group's
role is its productive time's.

Example::

    roles_of(processes)        # {"gen": "rollout", "learner": "trainer", "driver": "other"}
    pool_warnings(processes)   # [{"kind": "pool_unknown", "worker_group": "learner", "value": "trainers", ...}]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lens_rl.buckets import family_of
from lens_rl.offline.read.parts import ProcessPart

__all__ = ["ROLES", "pool_said", "pool_warnings", "roles_of"]

ROLES = ("rollout", "trainer", "other")


def pool_said(value: Any) -> str | None:
    """The role an ``rl.pool`` value names (``" Trainer"``: ``trainer``); None where it names none."""
    text = value.strip().lower() if isinstance(value, str) else None
    return text if text in ROLES else None


def roles_of(processes: Sequence[ProcessPart]) -> dict[str, str]:
    """worker group -> its pool's role: ``rl.pool`` where a process of it names one (:func:`pool_said`), else by
    its productive exclusive time (generation-family phases most: rollout; training or logprob most: trainer;
    else other)."""
    by_kind: dict[str, dict[str, int]] = {}
    said: dict[str, str] = {}
    for part in processes:
        group = part.key.group
        pool = pool_said(part.device.get("rl.pool"))
        if pool is not None:
            said.setdefault(group, pool)
        kinds = by_kind.setdefault(group, {})
        for (name, bucket), phase in part.phases.items():
            if bucket == "productive":
                kind = family_of(name) or "other"
                kinds[kind] = kinds.get(kind, 0) + phase.excl_ns
    out = {}
    for group, kinds in by_kind.items():
        total = sum(kinds.values())
        gen, train = kinds.get("generation", 0), kinds.get("training", 0) + kinds.get("logprob", 0)
        role = "rollout" if total and 2 * gen > total else "trainer" if total and 2 * train > total else "other"
        out[group] = said.get(group, role)
    return out


def pool_warnings(processes: Sequence[ProcessPart]) -> list[dict[str, Any]]:
    """``pool_unknown``: each (group, value) of an ``rl.pool`` that names no pool, with the role the group
    reads as instead; none where no process of a group says ``rl.pool``, or every one names a pool."""
    bad: dict[tuple[str, str], None] = {}
    for part in processes:
        value = part.device.get("rl.pool")
        if value is not None and pool_said(value) is None:
            bad.setdefault((part.key.group, value if isinstance(value, str) else repr(value)))
    if not bad:
        return []
    roles = roles_of(processes)
    return [
        {
            "kind": "pool_unknown",
            "worker_group": group,
            "value": value,
            "role": roles.get(group, "other"),
            "message": f"worker group {group!r}: rl.pool {value!r} names no pool (allowed: {', '.join(ROLES)}); "
            f"it reads as {roles.get(group, 'other')}",
        }
        for group, value in bad
    ]
