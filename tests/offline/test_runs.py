"""A run of rows made columns at once (Columns.extend, offline/read/runs.py) keeps what adding them one by one keeps, whatever the rows."""

from __future__ import annotations

import random
from typing import Any

from lens_rl.offline.read.columns import Columns
from lens_rl.store import Row

#: ids of lens_rl's form and of others that ``int(x, 16)`` reads too (or not), parents likewise
_IDS = [
    "00000000000000a1",
    "00000000000000B2",
    "0x000000000000c3",
    " 00000000000000d",
    "+00000000000000e",
    "-00000000000000f",
    "0000_00000000001",
    "0000000000000000",
    "00000000000000zz",
    "0000000000000001x",
    "abc",
    7,
]
_ATTRS: list[Any] = [
    None,
    {},
    {"rl.bucket": "productive", "rl.step": 3, "rl.num_tokens": 12},
    {"rl.bucket": "idle", "rl.step": 2**63, "rl.num_tokens": 2**64},
    {"rl.bucket": ["x"], "rl.step": [1], "rl.num_tokens": True},
    {"rl.bucket": "mine", "rl.step": "warmup", "rl.num_tokens": 1.5, "rl.ended_by_shutdown": True},
    {"rl.step": 1.0, "rl.flops_per_token": 6e9, "rl.ended_by_shutdown": 1},
    {"rl.step": {"a": 1}, "rl.flops_per_token": -1, "rl.trajectory_versions": [1, 2], "rl.policy_version": 3},
    {"gen_ai.usage.output_tokens": 9, "gen_ai.latency.e2e": 0.5, "gen_ai.usage.input_tokens": 3},
    {"rl.step": -(2**63), "rl.bucket": "wasted"},
]


def _row(rng: random.Random, n: int, odd: bool) -> Row:
    """A random store row: its attributes any of the above, and its ids and scope of lens_rl's plain form, or
    (``odd``) any of the above."""
    span_id = rng.choice(_IDS) if odd and rng.random() < 0.2 else f"{n + 1:016x}"
    parent = rng.choice([None, f"{rng.randrange(1, n + 2):016x}", *(_IDS if odd else [])])
    name = rng.choice(["train", "rl.job", "llm_request", "gen"])
    start = 1_700_000_000_000_000_000 + n
    return Row(
        n=name,
        s=span_id,
        p=parent,
        pr=rng.choice([None, True, False]),
        b=start,
        e=start + rng.randrange(0, 100),
        a=rng.choice(_ATTRS),
        sc=rng.choice([None, "lens_rl", "vllm"] if odd else [None, "lens_rl"]),
        st=rng.choice([None, "ERROR"]),
        sm="boom",
    )


def _state(cols: Columns) -> dict[str, Any]:
    return {k: getattr(cols, k) for k in Columns.__slots__ if k != "_shared"}


def test_a_run_added_at_once_keeps_what_adding_each_row_keeps() -> None:
    """Columns.extend (the reads' hot path) gives every column Columns.add gives row by row: ids of any form
    (text once one is not 16 hex digits), steps, buckets, tokens, flags, the sparse columns, the job's error and
    every span's that ended in error."""
    rng = random.Random(48)
    for trial in range(200):
        odd = trial % 2 == 1
        runs = [[_row(rng, n, odd and rng.random() < 0.1) for n in range(rng.randrange(0, 40))] for _ in range(3)]
        one, bulk = Columns(), Columns()
        for run in runs:
            for row in run:
                if row.n == "rl.job":
                    one.add_job(row)
                one.add(row.n, row.s, row.p, row.b, row.e, row.a, row.pr, row.sc)
            one.add_errors(run, len(one.names) - len(run))  # (the spans that ended in error, as every read keeps)
            bulk.extend(run)
        assert _state(bulk) == _state(one), trial
        assert [type(x) for x in bulk.ids] == [type(x) for x in one.ids]
