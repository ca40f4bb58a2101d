"""The host's election: one lock per run on a local file, given up on exit, never kept by a forked child."""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from lens_rl.devices import election


@pytest.fixture(autouse=True)
def _local_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The host's lock files in the test's own folder."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    yield


def test_one_holder_per_run_and_runs_apart() -> None:
    """Only one holder of a run's lock at a time; another run's lock is its own; the lock is local, per user."""
    one, two = f"e{uuid.uuid4().hex[:8]}", f"e{uuid.uuid4().hex[:8]}"
    first = election.try_lock(one)
    try:
        assert first is not None
        assert election.try_lock(one) is None
        other = election.try_lock(two)
        assert other is not None
        election.unlock(other)
        assert str(election.lock_path(one)).startswith(tempfile.gettempdir())
    finally:
        election.unlock(first)
    again = election.try_lock(one)
    assert again is not None
    election.unlock(again)
    election.unlock(again)  # a second release does nothing


def test_a_forked_child_does_not_keep_the_lock() -> None:
    """A child forked by the holder closes its copy: once the holder lets go, the lock is free even while the
    child lives."""
    rid = f"e{uuid.uuid4().hex[:8]}"
    fd = election.try_lock(rid)
    assert fd is not None
    go_read, go_write = os.pipe()
    ready_read, ready_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child (its copy closed by then): say so, then wait until told to go
        os.write(ready_write, b"r")
        os.read(go_read, 1)
        os._exit(0)
    try:
        assert os.read(ready_read, 1) == b"r"
        election.unlock(fd)
        taken = election.try_lock(rid)
        assert taken is not None
        election.unlock(taken)
    finally:
        os.write(go_write, b"x")
        for end in (go_read, go_write, ready_read, ready_write):
            os.close(end)
        os.waitpid(pid, 0)


def test_a_run_id_cannot_escape_the_directory() -> None:
    """A hostile run id stays one harmless file name in the temporary directory."""
    path = election.lock_path("../../etc/passwd")
    assert path.parent == election.lock_path("x").parent
    assert "/" not in path.name
