"""The critical path's memo of an earlier look: a step's record is reused only while it still holds, the
reused steps' ns per stretch key come from the kept sums less the records not reused, and what a look keeps
(its records' sums, what it walked, what it no longer holds true) adds up."""

from __future__ import annotations

from lens_rl.offline.rollup.memo import Memo, disk_key, from_disk, memo_key

KEYS = [("driver", 0, "generation", "productive"), ("lm_policy", 1, "train", "productive")]


def _records() -> list[list[object]]:
    return [
        ["d", 1, 100, 1.0, [0, 10, 1, 5], {"step": 1}],
        ["d", 2, 200, 1.0, [0, 7], {"step": 2}],
        ["d", 3, 300, 1.0, [1, 4], {"step": 3}],
    ]


def test_a_record_is_reused_only_while_its_step_is_as_it_was_and_ended_before_the_new_spans() -> None:
    records = _records()
    memo = Memo(records, KEYS, fresh_from=250, sums={0: [17, 2], 1: [9, 2]})
    assert memo.reused("d", 1, 100, 1.0) is records[0]
    assert memo.reused("d", 2, 201, 1.0) is None  # (its end moved)
    assert memo.reused("d", 2, 200, 2.0) is None  # (its wall changed)
    assert memo.reused("d", 3, 300, 1.0) is None  # (it ended after the earliest new span began)
    assert memo.reused("d", 9, 100, 1.0) is None and memo.reused("other", 1, 100, 1.0) is None
    assert memo.reused_ns() == {0: 10, 1: 5}  # (the sums less steps 2 and 3)
    assert Memo(records, KEYS, fresh_from=250).reused_ns() is None  # (no sums: the caller sums the records)


def test_what_a_look_keeps_adds_up() -> None:
    memo = Memo({memo_key(r): r for r in _records()}, KEYS, fresh_from=250, sums={0: [17, 2], 1: [9, 2]})
    memo.reused("d", 1, 100, 1.0)
    memo.reused_ns()
    memo.keep("d", 2, 201, 1.0, {KEYS[0]: 8}, {"step": 2})
    memo.keep("d", 3, 300, 1.0, {("lm_policy", 2, "train", None): 3}, {"step": 3})  # (a new stretch key)
    assert memo.earlier_keys == 2 and memo.keys[2] == ("lm_policy", 2, "train", None)
    assert memo.state_sums() == {0: [18, 2], 1: [5, 1], 2: [3, 1]}
    assert sorted(memo.dropped()) == [("d", "2"), ("d", "3")]  # (walked again: their earlier records go)
    assert [r[1] for r in memo.walked] == [2, 3] and len(memo.made) == 3
    fresh = Memo()
    fresh.keep("d", 1, 100, 1.0, {KEYS[0]: 4, KEYS[1]: 6}, {"step": 1})
    assert fresh.state_sums() == {0: [4, 1], 1: [6, 1]} and fresh.dropped() == []


def test_steps_of_every_type_keep_keys_of_their_own_and_read_back_from_the_file_as_written() -> None:
    """A step's key tells steps of different types apart (1, True, "1", 1.0 are four steps), the memo's file
    keeps each as the step's repr (as it always did), and a key read back from the file is the key again."""
    steps = [1, -5, 0, 2**70, True, False, "1", "-5", "'1'", "007", 1.0, -0.0, None, "²", "", "-"]
    keys = [memo_key(["d", step]) for step in steps]
    assert len(set(keys)) == len(steps)
    for step, key in zip(steps, keys, strict=True):
        assert disk_key(key) == ("d", repr(step))
        assert from_disk(list(disk_key(key))) == key
    memo = Memo([["d", step, 10, 1.0, [], {"step": step}] for step in steps], KEYS, fresh_from=None)
    assert [memo.reused("d", step, 10, 1.0)[1] for step in steps] == steps  # type: ignore[index]
    assert memo.reused("d", 1.0, 10, 1.0)[1] == 1.0 and memo.reused("d", "x", 10, 1.0) is None  # type: ignore[index]
