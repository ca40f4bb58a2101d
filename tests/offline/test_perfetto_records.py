"""Perfetto's cache records: typed data that round-trips a file's chunk and places, and refuses columns that do not add up."""

from __future__ import annotations

from array import array

import msgspec
import pytest

from lens_rl.offline.run.perfetto import Calls, Chunk, Options, Places
from lens_rl.offline.run.perfetto_records import (
    ChunkRec,
    GoOnRec,
    chunk_from,
    chunk_record,
    places_from,
    places_record,
)
from lens_rl.offline.run.record_codec import decode, encode


def test_a_chunk_round_trips_and_columns_that_do_not_add_up_are_refused() -> None:
    """A chunk's events, located spans and calls come back as they were kept; a record whose columns differ
    in length is a ValueError (never a trace drawn from it)."""
    chunk = Chunk(data=b"x", spans=3, first=5)
    chunk.locations[(1, 2)] = (["a", "b"], array("q", [1, 2]), array("q", [3, 4]))
    chunk.callees = Calls(array("Q", [7]), ["c"], array("q", [9]))
    back = chunk_from(decode(encode(chunk_record(chunk, b"events")), ChunkRec))
    assert (back.data, back.spans, back.first, back.locations) == (b"events", 3, 5, chunk.locations)
    assert (list(back.callees.flows), back.callees.callers, list(back.callees.starts)) == ([7], ["c"], [9])
    bad = msgspec.structs.replace(chunk_record(chunk, b""), callers=["c", "d"])
    with pytest.raises(ValueError):
        chunk_from(decode(encode(bad), ChunkRec))


def test_places_round_trip_with_their_threads_and_calls_in_order() -> None:
    """The processes, threads (numbers and names, in the order met) and calls a walk met come back in a
    fresh Places, so a grown file's new lines are numbered as a cold read numbers them."""
    opts = Options("json", {}, 0)
    places = Places(opts, Chunk(), False, 1)
    places.pid_of[10] = 1
    places.threads[(1, "main")], places.names[(1, "main")] = 1, "MainThread"
    places.threads[(1, 7)], places.names[(1, 7)] = 2, "worker"
    places.calls = [("s1", "p1", 1, 2, 50), ("s2", "p2", 1, 1, 60)]
    rec = GoOnRec(0, b"", {}, [], 0, 0, **places_record(places), sections=None)
    fresh = Places(opts, Chunk(), False, 1)
    places_from(decode(encode(rec), GoOnRec), fresh)
    assert list(fresh.threads.items()) == list(places.threads.items()) and fresh.names == places.names
    assert fresh.calls == places.calls and sorted(set(fresh.pid_of.values())) == [1]
