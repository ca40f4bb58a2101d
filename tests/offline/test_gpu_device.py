"""A device as a whole read gives it: every sample held, nothing kept from before."""

from __future__ import annotations

from pathlib import Path

from lens_rl.offline.run.gpu import read_devices
from tests.gpu_stores import device, write_samples


def test_a_whole_read_holds_every_sample(tmp_path: Path) -> None:
    """Each device of a sample file read whole holds all its samples, none skipped, no window state."""
    path = write_samples(tmp_path, "node0", 7, [device("GPU-a"), device("GPU-b", 1)], lambda t: [[50] + [1] * 7] * 2)
    devices, _stats = read_devices([path])
    assert sorted(devices) == ["GPU-a", "GPU-b"]
    for got in devices.values():
        assert got.t.size == 40 and got.skipped == 0 and got.before is None and got.files == (path.name,)
