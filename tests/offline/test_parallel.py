"""The parallel map: per-file work serially or on local processes, results in file order, identical."""

from __future__ import annotations

import os
import weakref
from pathlib import Path

from lens_rl.offline.run.parallel import default_jobs, map_files, no_gc


def _size_with(path: str | os.PathLike[str], extra: int) -> int:
    return Path(path).stat().st_size + extra


def test_results_come_in_file_order_whatever_the_jobs(tmp_path: Path) -> None:
    """map_files yields fn(path, *args) in the paths' order, the shared args travelling once per worker."""
    paths = []
    for n in range(7):
        path = tmp_path / f"f{n}"
        path.write_bytes(b"x" * (100 - n))
        paths.append(path)
    expected = [100 - n + 5 for n in range(7)]
    assert list(map_files(_size_with, paths, 5, jobs=1)) == expected == list(map_files(_size_with, paths, 5, jobs=3))
    assert 1 <= default_jobs() <= 4


def test_no_gc_pauses_the_cyclic_collector_and_restores_it() -> None:
    """Reading builds millions of acyclic objects: the collector is paused inside, as it was after."""
    import gc

    assert gc.isenabled()
    collections = [generation["collections"] for generation in gc.get_stats()]
    with no_gc():
        assert not gc.isenabled()
        made = [[n] for n in range(50_000)]
    assert gc.isenabled()
    after = [[n] for n in range(100)]
    # what was made inside is not young any more: no collection walks it the moment the collector is back
    assert [generation["collections"] for generation in gc.get_stats()] == collections
    assert len(made) + len(after) == 50_100

    class Node:
        pass

    node = Node()
    node.self = node  # type: ignore[attr-defined]
    gone = weakref.ref(node)
    del node
    gc.collect()
    assert gone() is None  # (a cycle is still collected)
    gc.freeze()  # (a process that froze its own objects, to fork: they stay frozen)
    try:
        frozen = gc.get_freeze_count()
        with no_gc():
            more = [[n] for n in range(1_000)]
        assert gc.get_freeze_count() == frozen and gc.isenabled() and len(more) == 1_000
    finally:
        gc.unfreeze()
