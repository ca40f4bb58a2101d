"""The GPU join through the refresh cache: a look joins only the spans an earlier look had not settled, and its
answer is a cold read's byte for byte; a hostile kept record is one stderr line and a cold join."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from lens_rl.offline.run.gpu_kept import MAX_BYTES, JoinKept
from tests.conftest import lens
from tests.gpu_stores import device, harm_record, write_gpu_worker, write_samples
from tests.stores import at_ns, span, write_process


def _reading(t: float) -> list[Any]:
    u = int(t * 7) % 101 if int(t) % 9 else 0
    return [[u, u // 2, int(1e9 + 1e7 * (int(t * 3) % 50)), 150000, 1980, None, None, None]]


def _actor_spans(rank: int, lo: int, hi: int) -> list[dict[str, Any]]:
    out = []
    for k in range(lo, hi):
        step = k // 10
        out.append(
            span(
                "generation", k, k + 0.6, f"g{rank}-{k}", parent=f"d{step}", remote=True, bucket="productive", step=step
            )
        )
        out.append(
            span(
                "training",
                k + 0.6,
                k + 0.95,
                f"t{rank}-{k}",
                parent=f"d{step}",
                remote=True,
                bucket="productive",
                step=step,
            )
        )
    return out


def _append(path: Path, lines: list[Any]) -> None:
    with path.open("a") as handle:
        handle.write("".join(json.dumps(x) + "\n" for x in lines))


def _samples(lo: float, hi: float) -> list[Any]:
    return [{"t": at_ns(int(round(k / 2 * 1e9))), "d": _reading(k / 2)} for k in range(int(lo * 2), int(hi * 2))]


def _store(run: Path) -> Path:
    steps = [span("step", 10 * s, 10 * s + 9.99, f"d{s}", parent="job", step=s) for s in range(4)]
    write_process(run, "driver", 0, 1, [span("rl.job", 0, 40, "job"), *steps], root="job")
    for rank in (0, 1):
        write_gpu_worker(run, rank, _actor_spans(rank, 0, 20))
        write_samples(run, f"node{rank}", 100 + rank, [device(f"GPU-{rank}")], _reading, end_s=20.0)
    return run


def _look(run: Path, *args: str) -> tuple[bytes, str]:
    out = lens("goodput", str(run), "--json", *args)
    assert out.returncode == 0, out.stderr
    return out.stdout.encode(), out.stderr


def _kept(run: Path) -> JoinKept:
    return msgspec.msgpack.decode((run / ".lens_rl-cache" / "gpu-join.kept").read_bytes(), type=JoinKept)


def test_a_store_grown_in_three_rounds_joins_as_a_cold_read_each_round(tmp_path: Path) -> None:
    """Spans and samples appended twice (the second time a takeover's new sample file among them): each look
    through the cache joins only what its last look had not settled, and answers as --no-cache, byte for byte."""
    run = _store(tmp_path / "r1")
    first, _ = _look(run)
    assert first == _look(run, "--no-cache")[0] and b'"gpu"' in first
    settled = {p.key: p.n for p in _kept(run).processes}
    assert settled and all(0 < n < 40 for n in settled.values())
    for rank in (0, 1):  # round 2: 10 s more spans and samples
        _append(run / f"spans-actor-{rank}-{10 + rank}.jsonl", _actor_spans(rank, 20, 30))
        _append(run / f"gpu-node{rank}-{100 + rank}.jsonl", _samples(20, 30))
    second, _ = _look(run)
    assert second == _look(run, "--no-cache")[0] and second != first
    grown = {p.key: p.n for p in _kept(run).processes}
    assert grown.keys() == settled.keys() and all(grown[k] > n for k, n in settled.items())
    for rank in (0, 1):  # round 3: node0's sampler taken over by another process (a new sample file)
        _append(run / f"spans-actor-{rank}-{10 + rank}.jsonl", _actor_spans(rank, 30, 40))
    _append(run / "gpu-node1-101.jsonl", _samples(30, 40))
    write_samples(run, "node0", 200, [device("GPU-0")], _reading, start_s=30.0, end_s=40.0)
    third, _ = _look(run)
    assert third == _look(run, "--no-cache")[0] and third != second
    assert json.loads(third)["gpu"]["devices"][0]["files"] == ["gpu-node0-100.jsonl", "gpu-node0-200.jsonl"]


@pytest.mark.parametrize("harm", ["planted", "cut", "oversized", "fifo"])
def test_a_hostile_kept_join_record_is_one_stderr_line_and_a_cold_join(tmp_path: Path, harm: str) -> None:
    """A kept GPU join record of another shape, cut short, oversized or a FIFO in its place (never opened: it
    would block) is said once on stderr and the GPU part is joined cold: the answer is --no-cache's."""
    run = _store(tmp_path / "r1")
    _look(run)
    for rank in (0, 1):
        _append(run / f"spans-actor-{rank}-{10 + rank}.jsonl", _actor_spans(rank, 20, 30))
        _append(run / f"gpu-node{rank}-{100 + rank}.jsonl", _samples(20, 30))
    record = run / ".lens_rl-cache" / "gpu-join.kept"
    assert harm_record(record, harm, {"key": "x", "processes": [[1, 2, 3]], "sums": b"\0" * 99}, MAX_BYTES)
    got, stderr = _look(run)
    assert got == _look(run, "--no-cache")[0]
    said = [line for line in stderr.splitlines() if "GPU join's kept record" in line]
    assert len(said) == 1, stderr
