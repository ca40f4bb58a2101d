"""The parallel map: per-file work serially or on local processes, results in file order, identical."""

from __future__ import annotations

import os
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
    with no_gc():
        assert not gc.isenabled()
    assert gc.isenabled()
