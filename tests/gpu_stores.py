"""Hand-written GPU sample files for tests: the sampler's format (``lens_rl.gpu/1``) with scripted readings,
and the scripted job of the GPU tests (a driver and two GPU workers).

Example::

    write_samples(run, "node0", 77, [device("GPU-a")], lambda t: [[80, 10, 1e9, 200000, 1980, None, None, None]])
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from tests.stores import at_ns, span, write_process

ALL = ["util", "mem_util", "mem_used", "power", "sm_clock", "sm_active", "sm_occupancy", "tensor_active"]
PLAIN = ALL[:5]


def device(uuid: str, i: int = 0, has: Sequence[str] = tuple(PLAIN), mem_total: int = 80 * 2**30) -> dict[str, Any]:
    return {"i": i, "uuid": uuid, "name": "NVIDIA H100 80GB HBM3", "mem_total": mem_total, "has": list(has)}


def write_samples(
    run: Path,
    host: str,
    pid: int,
    devices: list[dict[str, Any]],
    reading: Callable[[float], list[Any]],
    *,
    start_s: float = 0.0,
    end_s: float = 20.0,
    hz: float = 2.0,
    extra: Sequence[str] = (),
) -> Path:
    """A sample file: one line every ``1/hz`` s from ``start_s`` to ``end_s`` (excluded), ``reading(t)``
    giving each device's values at ``t``; ``extra`` lines appended as they are."""
    run.mkdir(parents=True, exist_ok=True)
    head = {
        "v": 1,
        "header": True,
        "format": "lens_rl.gpu/1",
        "kind": "gpu",
        "host": host,
        "run_id": "r1",
        "attempt": 0,
        "pid": pid,
        "since": at_ns(int(start_s * 1e9)),
        "hz": hz,
        "devices": devices,
    }
    lines = [json.dumps(head)]
    n = int(round((end_s - start_s) * hz))
    for k in range(n):
        t = start_s + k / hz
        lines.append(json.dumps({"t": at_ns(int(round(t * 1e9))), "d": reading(t)}))
    lines.extend(extra)
    path = run / f"gpu-{host}-{pid}.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


#: the scripted job: generation 1-11 s (its devices idle 1.5 + 1.5 + 1 s of it: 40 %), every device idle
#: 11-14 s (the gap), training 14-19 s at 90 %
GEN_IDLE = [(2.0, 3.5), (5.0, 6.5), (8.0, 9.0)]


def util_at(t: float) -> float:
    if 1 <= t < 11:
        return 0 if any(a <= t < b for a, b in GEN_IDLE) else 80
    if 14 <= t < 19:
        return 90
    return 0


def scripted_reading(t: float) -> list[Any]:
    u = util_at(t)
    mem = 2e9 if 1 <= t < 11 else 1e9
    return [[u, u // 2, int(mem), 150000 + 3000 * u, 1980, None, None, None]]


def write_gpu_worker(run: Path, rank: int, spans: list[Any]) -> Path:
    """Worker ``rank`` of group ``actor`` (pid ``10 + rank``) on host ``node<rank>``, using ``GPU-<rank>``."""
    return write_process(
        run, "actor", rank, 10 + rank, spans, **{"rl.gpu.uuids": [f"GPU-{rank}"], "host.name": f"node{rank}"}
    )


def write_scripted_job(run: Path, *, samples: bool = True) -> Path:
    """The driver (rl.job 0-20 s, one step) and two GPU workers (generation, then training), with their
    sample files (one node each) unless ``samples`` is False."""
    write_process(
        run,
        "driver",
        0,
        1,
        [
            span("rl.job", 0, 20, "job"),
            span("step", 0.5, 19.5, "s1", parent="job", step=1),
            span("rollout", 1, 11, "d-gen", parent="s1", bucket="idle"),
            span("train", 14, 19, "d-train", parent="s1", bucket="idle"),
        ],
        root="job",
    )
    for rank in (0, 1):
        write_gpu_worker(
            run,
            rank,
            [
                span("generation", 1, 11, f"g{rank}", parent="d-gen", remote=True, bucket="productive", step=1),
                span("training", 14, 19, f"t{rank}", parent="d-train", remote=True, bucket="productive", step=1),
            ],
        )
        if samples:
            write_samples(run, f"node{rank}", 100 + rank, [device(f"GPU-{rank}")], scripted_reading)
    return run


def harm_record(record: Path, harm: str, planted: dict[str, Any], max_bytes: int) -> bool:
    """A kept cache record harmed as a hostile-cache test asks: ``planted`` (MessagePack of another shape in its
    place), ``cut`` (its first half), ``fifo`` (a FIFO in its place) or ``oversized`` (past ``max_bytes``);
    False for another harm (the test's own to make)."""
    if harm == "planted":
        record.write_bytes(msgspec.msgpack.encode(planted))
    elif harm == "cut":
        record.write_bytes(record.read_bytes()[: record.stat().st_size // 2])
    elif harm == "fifo":
        record.unlink()
        os.mkfifo(record)
    elif harm == "oversized":
        os.truncate(record, max_bytes + 1)
    else:
        return False
    return True
