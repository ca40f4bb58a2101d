"""The refresh cache's records: a part of every shape comes back from its MessagePack record equal to itself
(ints stay ints, odd steps and span ids as they were), and a record that does not fit its schema is refused."""

from __future__ import annotations

from array import array
from typing import Any

import msgspec
import pytest

from lens_rl.offline.read.critical import CritPart
from lens_rl.offline.read.parts import PhasePart, ProcessPart, RequestsPart, Series
from lens_rl.offline.read.pipe import PipePart
from lens_rl.offline.read.steps import StepPart
from lens_rl.offline.run.record_codec import items_of
from lens_rl.offline.run.records import PartRec, array_of, decode, encode, part_from, part_record, raw
from lens_rl.store import Process


def _part() -> ProcessPart:
    part = ProcessPart(Process("lm_policy", 3, 103, 1, False), spans=7, runs={"a"}, sampled=True)
    part.lifetime, part.jobs, part.since = (1, 9), [(1, 9)], 0
    part.bucketed, part.rerun, part.rerun_steps = array("q", [1, 4]), array("q", [5, 6]), {2, "warm"}
    part.steps = {3: StepPart(1, 5), "warmup": StepPart(None, 7)}
    part.phases = {("gen", "productive"): PhasePart(2, 10, 8, array("q", [4, 6]), 1.5, 3, sketch={1: 2})}
    part.compute = {"gen": Series(array("q", [1, 2]), array("q", [3, 4])), "odd": {"x": 5}}
    part.step_tokens = {("own", 3): 10.0, ("gen", "warmup"): 2}
    part.enclosing, part.gaps = {("gen", None): 1}, {("a", "step end"): 3}
    part.untokened = {"00000000000000ff": ("gen", "productive", 5, 3), "not-hex": ("gen", None, 1, "w")}
    part.remote_tokens = {"abc": [1.0, 2.0]}
    part.device, part.job_error = {"host": "h", "rl.gpu_ids": [0, 1]}, {"type": "E", "message": "m"}
    part.requests = RequestsPart()
    part.requests.e2e.append(0.5)
    part.pipe = PipePart()
    part.pipe.productive, part.pipe.syncs = array("q", [1, 3]), [(1, 2, 3), (4, 5, None)]
    part.gpu = (("GPU-a",), array("q", [1]), array("q", [2]), [("gen", "productive")], array("i", [0]), array("q", [3]))
    part.pipe.consumed = [(3, 2, [1, 2], [60, 40], None, [3, 1], 9), ("w", "w", [0], None, 1, None, 10)]
    crit = CritPart()
    crit.node_ids, crit.e_parent = array("Q", [1, 2]), ["x-parent"]
    crit.node_attr, crit.attrs = array("i", [0, 0]), [("gen", "productive")]
    crit.a, crit.node, crit.steps = array("q", [5]), array("i", [1]), {3: [(0, 1, 9)]}
    crit.e_start, crit.e_end, crit.e_node = array("q", [1]), array("q", [2]), array("i", [0])
    part.crit = crit
    return part


def test_a_part_of_every_shape_comes_back_equal() -> None:
    """Every field of a part (steps of odd keys, a dict of compute, critical walks, requests, ids that are not
    lens_rl's) survives its record exactly."""
    part = _part()
    back = part_from(decode(encode(part_record(part)), PartRec))
    assert back == part
    assert type(back.step_tokens[("gen", "warmup")]) is int and back.rerun_steps == {2, "warm"}


def test_arrays_are_raw_little_endian_and_cut_ones_are_refused() -> None:
    """An array is its raw little-endian bytes; a buffer cut mid-item is a ValueError, an array of another
    type than the schema's a TypeError, a record of another shape a DecodeError."""
    assert bytes(raw(array("q", [1]), "q")) == (1).to_bytes(8, "little")
    assert list(array_of("q", memoryview((2).to_bytes(8, "little")))) == [2]
    with pytest.raises(ValueError):
        array_of("q", memoryview(b"abc"))
    with pytest.raises(TypeError):
        raw(array("i", [1]), "q")
    with pytest.raises(msgspec.DecodeError):
        decode(encode([1, 2, 3]), PartRec)


def test_columns_only_read_are_read_in_place_and_cut_ones_are_refused() -> None:
    """A column a part only reads is a view of the bytes read (no copy of a cache entry's megabytes), with the
    same items; one cut mid-item is a ValueError, as an array's is."""
    data = bytearray((2).to_bytes(8, "little") + (3).to_bytes(8, "little"))
    items = items_of("q", memoryview(data))
    assert list(items) == [2, 3] and items.tolist() == [2, 3]
    data[0] = 7
    assert items[0] == 7  # (in place: the bytes read, not a copy)
    with pytest.raises(ValueError):
        items_of("q", memoryview(b"abcdefghi"))


def test_a_memo_record_claiming_4_gib_is_refused_before_anything_is_allocated() -> None:
    """A memo record (as read under the user's seal) whose map, array or bytes claim 4 GiB is a DecodeError,
    and decoding it allocates next to nothing."""
    import tracemalloc

    from lens_rl.offline.run.records import MemoRec

    for planted in (b"\xdf\xff\xff\xff\xff", b"\xdd\xff\xff\xff\xff", b"\xc6\xff\xff\xff\xff" + b"x" * 64):
        tracemalloc.start()
        try:
            with pytest.raises(msgspec.DecodeError):
                decode(planted, MemoRec)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 1 << 20, peak


def test_an_entry_and_a_delta_carry_one_file_state() -> None:
    """An entry's and a delta's file state is one schema (StateRec): the state an entry carries decodes
    unchanged from a delta, and an entry record is refused as a delta (its tag)."""
    from lens_rl.offline.run.records import DeltaRec, EntryRec, StateRec, StatsRec

    stats = StatsRec(1, 2, 0, 0, [], 0, [], [])
    state = StateRec("t", 10, 12, 1, 2, b"cut", [{"format": "x"}], 0, raw(array("q", [0, 5, 0]), "q"), stats)
    entry = decode(encode(EntryRec("o", (1, 2, "line"), state, [], [])), EntryRec)
    delta = decode(encode(DeltaRec("s", state, [], [])), DeltaRec)
    assert msgspec.structs.astuple(entry.state)[:-2] == msgspec.structs.astuple(delta.state)[:-2]
    assert bytes(entry.state.held) == bytes(delta.state.held) and entry.state.stats == delta.state.stats == stats
    with pytest.raises(msgspec.DecodeError):
        decode(encode(EntryRec("o", (1, 2, "line"), state, [], [])), DeltaRec)


def test_a_record_naming_a_bucket_the_rollups_do_not_know_is_refused() -> None:
    """A part record whose bucket totals, phases, phases per step, enclosing, untokened, GPU spans or critical walks name a
    bucket outside the four (an edited cache file), or whose phases per step are not sorted by step, is a
    ValueError: the entry is corrupt and read cold, never a KeyError in a rollup."""
    from lens_rl.offline.read.phase_steps import PhaseSteps

    def table(*steps: int) -> PhaseSteps:
        return PhaseSteps(array("q", steps), *(array("q", [1] * len(steps)) for _ in range(3)))

    def foreign(part: ProcessPart) -> None:
        part.bucket_ns["overheaX"] = part.bucket_ns.pop("overhead")

    def edits() -> list[Any]:
        return [
            foreign,
            lambda p: p.phases.update({("gen", "overheaX"): PhasePart(1, 1, 1, array("q", [1]))}),
            lambda p: p.phase_steps.update({("gen", "overheaX"): table(1)}),
            lambda p: p.enclosing.update({("gen", "overheaX"): 1}),
            lambda p: p.untokened.update({"00000000000000fe": ("gen", "overheaX", 5, 3)}),
            lambda p: setattr(p, "gpu", (*p.gpu[:3], [("gen", "overheaX")], *p.gpu[4:])),
            lambda p: setattr(p.crit, "attrs", [("gen", "overheaX")]),
            lambda p: p.phase_steps.update({("gen", "productive"): table(2, 1)}),
            lambda p: p.phase_steps.update({("gen", "productive"): table(1, 1)}),
        ]

    sound = _part()
    sound.phase_steps[("gen", None)] = table(1, 2)
    assert part_from(decode(encode(part_record(sound)), PartRec)) == sound
    for edit in edits():
        part = _part()
        edit(part)
        with pytest.raises(ValueError):
            part_from(decode(encode(part_record(part)), PartRec))
