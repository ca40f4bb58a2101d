"""Calls across processes drawn as flow arrows: callees joined to their callers' locations as files arrive.

Example::

    flows = Flows("json", origin, out.write)
    for chunk in chunks:
        flows.add(chunk)                       # writes each call's caller end once its caller is known
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from lens_rl.offline.run.perfetto import Calls, Chunk
from lens_rl.offline.show.perfetto.places import SLICE
from lens_rl.offline.show.perfetto.proto import Slot, proto_module, template, uuid_of

__all__ = ["Flows"]


class Flows:
    """Joins callees to their callers' locations as files arrive, writing the caller ends as they are met.

    Files with callers come first (the driver's), so nearly every callee resolves at once:
    what is kept is the callers' locations (spans other files call into), not every callee,
    each made ready to write when it arrives (a JSON event's fixed text, a protobuf
    packet's slot), so the parent's one thread does little per call.
    """

    def __init__(self, fmt: str, origin: int, write: Callable[[bytes], Any]) -> None:
        self.fmt, self.origin, self.write = fmt, origin, write
        self.callers: dict[str, tuple[Any, int, int]] = {}  # span id -> (what its events start with, start, end)
        self.pending = Calls()  # callees whose caller was not met yet
        self._prefixes: dict[tuple[int, int], Any] = {}  # per caller thread

    def _prefix(self, pid: int, tid: int) -> Any:
        prefix = self._prefixes.get((pid, tid))
        if prefix is None:
            if self.fmt == "json":
                prefix = f'{{"ph":"s","name":"call","cat":"flow","pid":{pid},"tid":{tid},"id":'
            else:  # a slot for the instant (see _proto_events): each call's flow id is set in place
                pb = proto_module()
                prefix = Slot(
                    pb, template(pb, uuid_of("t", pid, tid), pb.TrackEvent.TYPE_INSTANT, "call"), "flow_ids", True
                )
            self._prefixes[(pid, tid)] = prefix
        return prefix

    def add(self, chunk: Chunk) -> None:
        """Record a chunk's callers, and write the caller end of each call whose caller is known by now."""
        for (pid, tid), (ids, starts, ends) in chunk.locations.items():
            located = zip(itertools.repeat(self._prefix(pid, tid)), starts, ends)  # (ends with the starts)
            self.callers.update(zip(ids, located, strict=True))
        waiting = self.pending
        if chunk.locations and waiting:  # (the newly known callers may be theirs)
            self.pending = Calls()
        self._join(chunk.callees, self.pending)
        if waiting is not self.pending:
            self._join(waiting, self.pending)

    def _join(self, calls: Calls, pending: Calls) -> None:
        out: list[Any] = []  # JSON: text; the protobuf: bytes
        keep = out.append
        json_out = self.fmt == "json"
        write = (lambda: self.write("".join(out).encode())) if json_out else (lambda: self.write(b"".join(out)))
        origin = self.origin
        for flow, caller, start, span_id in zip(
            calls.flows, map(self.callers.get, calls.callers), calls.starts, calls.callers, strict=True
        ):
            if caller is None:
                pending.flows.append(flow)
                pending.callers.append(span_id)
                pending.starts.append(start)
                continue
            prefix, lo, hi = caller
            at = lo if start < lo else hi if start > hi else start  # the moment, within the caller's slice
            if json_out:
                keep(f'{prefix}{flow},"ts":{(at - origin) / 1000.0!r}}},\n')
            else:
                prefix.packet.timestamp = at
                prefix.flows[0] = flow
                keep(prefix.serialize())
            if len(out) >= SLICE:
                write()
                out.clear()
        if out:
            write()
