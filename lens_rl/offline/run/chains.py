"""Which of a read's spans have their whole ancestor chain in it (the refresh cache settles those, and holds
the rest until their parents are written; :mod:`lens_rl.offline.run.cache`). A chain ends at a span with no
parent, at the job root, at a parent in another process (a remote one) or at a malformed cycle; a span whose
parent is not in the read waits for it, with its children. A read where every chain ends in it (a finished
file) is told so from a set difference, without walking a chain.

Example::

    keep, late = complete_chains(cols, settled_ids)  # keep[i]: row i settles; late: read the file cold
"""

from __future__ import annotations

from array import array
from itertools import compress
from typing import Any

from lens_rl.offline.read.columns import REMOTE_PARENT, Columns
from lens_rl.offline.run.settled_ids import id_key, settled_has

__all__ = ["complete_chains"]

#: a flags byte -> 1 where the span's parent is not a remote one (whose chain ends at it)
_LOCAL = bytes(0 if f & REMOTE_PARENT else 1 for f in range(256))


def complete_chains(cols: Columns, settled: Any) -> tuple[bytearray, bool]:
    """Which rows have their whole ancestor chain in the batch (1), and whether a row hangs from a span an
    earlier read settled (a late child: the file must be read cold)."""
    ids, parents, flags, root = cols.ids, cols.parent_ids, cols.flags, cols.root
    none = 0 if type(parents) is array else None
    outside = set(parents).difference(ids)  # (parents not in the batch: the only places a chain can stop short)
    outside.discard(none)
    outside.discard(root)
    if not outside or outside.isdisjoint(compress(parents, flags.translate(_LOCAL))):
        return bytearray(b"\x01") * len(ids), False  # (every chain ends in the batch: no walk)
    index = {span_id: i for i, span_id in enumerate(ids)}
    state = bytearray(len(ids))  # 0 not yet, 1 complete, 2 held
    late = False
    for i in range(len(ids)):
        if state[i]:
            continue
        trail: list[int] = []
        on_trail: set[int] = set()
        j = i
        while True:
            if state[j]:
                result = state[j]
                break
            trail.append(j)
            on_trail.add(j)
            parent = parents[j]
            if parent == none or parent == root or flags[j] & REMOTE_PARENT:
                result = 1
                break
            k = index.get(parent)
            if k is None:  # not written yet, or settled by an earlier read
                late = late or settled_has(settled, parent if type(parent) is not str else id_key(parent))
                result = 2
                break
            if k == j or k in on_trail:  # a malformed cycle: reduced as a cold read reduces it
                result = 1
                break
            j = k
        for t in trail:
            state[t] = result
    return bytearray(1 if s == 1 else 0 for s in state), late
