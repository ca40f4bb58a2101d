"""Never two profilers on one device: a window claims one lock per GPU its process uses (its resolved UUIDs,
else its CUDA_VISIBLE_DEVICES entries, else ``all``), all or none, and a dead holder's lock is taken over."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from lens_rl.devices.profile_devices import DeviceBusyError, claim_devices, device_keys, release_devices


@pytest.fixture
def other() -> Iterator[int]:
    """The pid of another live process (a lock holder that is not this one)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def test_each_device_is_its_own_lock_named_by_uuid_else_by_cuda_visible_devices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A process's UUIDs name its locks (an index and a UUID of one GPU meet there); without them each
    CUDA_VISIBLE_DEVICES entry does, else ``all``; a CPU-only torch window claims nothing."""
    host = socket.gethostname()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    assert device_keys("cuda", ["GPU-b", "GPU-a"]) == [f"{host}-GPU-a", f"{host}-GPU-b"]
    assert device_keys("cuda") == [f"{host}-0", f"{host}-1"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert device_keys("vllm") == [f"{host}-all"]
    monkeypatch.setitem(sys.modules, "torch", None)
    assert device_keys("torch", ["GPU-a"]) == []


def test_a_claim_is_all_or_none_and_a_dead_holders_lock_is_taken_over(tmp_path: Path, other: int) -> None:
    """Two windows sharing one of their GPUs never hold both: the second finds it busy and keeps none of its
    locks; once released, or once the holder is dead, the claim goes through."""
    (tmp_path / ".device-h-GPU-b.lock").write_text(str(other))
    with pytest.raises(DeviceBusyError, match="has a profiler window open in process"):
        claim_devices(tmp_path, ["h-GPU-a", "h-GPU-b", "h-GPU-c"])
    assert sorted(p.name for p in tmp_path.iterdir()) == [".device-h-GPU-b.lock"]  # (a's released, c never made)
    (tmp_path / ".device-h-GPU-b.lock").write_text("999999999")  # (a pid no process has)
    held = claim_devices(tmp_path, ["h-GPU-a", "h-GPU-b"])
    assert [p.name for p in held] == [".device-h-GPU-a.lock", ".device-h-GPU-b.lock"]
    release_devices(held)
    assert not list(tmp_path.iterdir())
