"""The store's format: headers, file names that stay inside trace_dir, a process's identity from its header."""

from __future__ import annotations

from pathlib import Path

from lens_rl.store import Process, file_name, header, process_of, safe_part, store_path


def test_a_header_carries_the_resource_pid_since_and_role() -> None:
    """A span file's header: format, kind, the driver's role, the resource, pid, since, remote_parents."""
    head = header("spans", {"rl.worker_group": "driver", "nv.dl.rank": 0}, 42, 123, role="driver")
    assert head == {
        "v": 2,
        "header": True,
        "format": "lens_rl.spans/2",
        "kind": "spans",
        "role": "driver",
        "resource": {"rl.worker_group": "driver", "nv.dl.rank": 0},
        "pid": 42,
        "since": 123,
        "remote_parents": True,
    }
    assert "remote_parents" not in header("metrics", {}, 1, 0) and header("metrics", {}, 1, 0)["role"] == "worker"


def test_the_process_comes_from_the_header_alone() -> None:
    """Group, rank, pid (the header's, else the resource's), attempt; the driver by its role, not its name."""
    res = {"rl.worker_group": "driver-pool", "nv.dl.rank": "3", "process.pid": 9, "rl.attempt": 1}
    assert process_of(res, {"pid": 7}) == Process("driver-pool", 3, 7, 1, False)
    assert process_of({"rl.worker_group": "driver"}, {"role": "driver"}).driver
    assert not process_of({"rl.worker_group": "driver"}, {"role": "worker"}).driver
    assert process_of({"nv.dl.rank": "x", "process.pid": None}) == Process("worker", 0, 0, 0, False)


def test_no_value_writes_outside_trace_dir(tmp_path: Path) -> None:
    """Separators, dot-dot and over-long values are made one harmless path part."""
    path = store_path(tmp_path, "../../etc", "spans", {"rl.worker_group": "a/../b", "nv.dl.rank": "0/x"}, 5)
    assert path.resolve().is_relative_to(tmp_path.resolve()) and path.parent.name == "_.._etc"
    assert (
        path.name
        == "spans-a_.._b-0_x-5.jsonl"
        == file_name("spans", {"rl.worker_group": "a/../b", "nv.dl.rank": "0/x"}, 5)
    )
    long = safe_part("x" * 500, "d")
    assert len(long) == 64 and long.startswith("x") and safe_part("..", "d") == "d"
