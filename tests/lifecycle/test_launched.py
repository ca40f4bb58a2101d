"""``lens_rl.lifecycle.launched``: under ``lens-rl run`` the driver's role is claimed once, by the first process
that asks, and only that process opens the job root with the ids ``lens-rl run`` fixed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def test_the_first_process_to_open_a_step_claims_the_driver_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under lens-rl run the claim is the first asker's: it holds it on asking again and gets the root's ids;
    a forked child of it, and a process of another node (no such folder), are workers."""
    from lens_rl.lifecycle import launched

    monkeypatch.setattr(launched, "_won", [])
    monkeypatch.setenv(launched.ROOT_ENV, f"00-{'ab' * 16}-{'cd' * 8}-01")
    assert not launched.under_run() and not launched.claim() and launched.root_ids() is None
    monkeypatch.setenv(launched.CLAIM_ENV, str(tmp_path / "driver"))
    assert launched.under_run() and launched.claim() and launched.claim()
    assert launched.root_ids() == (int("ab" * 16, 16), int("cd" * 8, 16), None)
    assert (tmp_path / "driver").read_text() == f"{os.getpid()} 0 {launched._WHERE}\n"
    pid = os.fork()
    if pid == 0:  # the driver's child: never the driver
        os._exit(0 if not launched.claim() and launched.root_ids() is None else 1)
    assert os.waitpid(pid, 0)[1] == 0
    monkeypatch.setattr(launched, "_won", [])
    monkeypatch.setenv(launched.CLAIM_ENV, str(tmp_path / "no-such-folder" / "driver"))
    assert not launched.claim()


def test_a_dead_drivers_claim_is_taken_over_as_the_next_attempt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A driver that died leaves its claim: the next process to ask is the driver of the next attempt, with a
    new root span in the job's trace and no launch of its own; while that driver lives, no other process is."""
    from lens_rl.lifecycle import launched

    monkeypatch.setattr(launched, "_won", [])
    trace, span = "ab" * 16, "cd" * 8
    monkeypatch.setenv(launched.ROOT_ENV, f"00-{trace}-{span}-01")
    monkeypatch.setenv("TRACEPARENT", f"00-{trace}-{span}-01")
    monkeypatch.setenv("LENS_RL_OTEL_ATTEMPT", "2")
    monkeypatch.setenv(launched.CLAIM_ENV, str(tmp_path / "driver"))
    pid = os.fork()
    if pid == 0:  # the first driver: claims, then dies
        os._exit(0 if launched.claim() and not launched.took_over() else 1)
    assert os.waitpid(pid, 0)[1] == 0
    assert (tmp_path / "driver").read_text() == f"{pid} 2 {launched._WHERE}\n"
    assert launched.claim() and launched.took_over() and launched.claim()
    assert os.environ["LENS_RL_OTEL_ATTEMPT"] == "3"
    assert (tmp_path / "driver.1").read_text() == f"{os.getpid()} 3 {launched._WHERE}\n"
    ids = launched.root_ids()
    assert ids is not None and ids[0] == int(trace, 16) and ids[1] != int(span, 16)
    assert os.environ["TRACEPARENT"] == os.environ[launched.ROOT_ENV]
    pid = os.fork()
    if pid == 0:  # another process of the job while this driver lives: a worker
        launched._won[:] = []
        os._exit(0 if not launched.claim() else 1)
    assert os.waitpid(pid, 0)[1] == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["driver", "driver.1"]


def test_a_claim_held_on_another_host_is_never_taken_over(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A claim folder shared across hosts or containers: a driver claim written elsewhere, whose pid means
    nothing here (no such process on this host), is a live driver's for all this process can tell: it is a
    worker, no second driver, no spurious next attempt."""
    from lens_rl.lifecycle import launched

    monkeypatch.setattr(launched, "_won", [])
    monkeypatch.setenv(launched.CLAIM_ENV, str(tmp_path / "driver"))
    monkeypatch.setenv("LENS_RL_OTEL_ATTEMPT", "0")
    (tmp_path / "driver").write_text("4194303 0 other-node/pid:[4026531836]\n")  # (no such pid here)
    assert not launched.claim()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["driver"]


def test_a_folder_without_hard_links_still_gets_one_driver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the claim folder's file system has no hard links, the first process to ask is the driver and the
    next a worker, as with them."""
    from lens_rl.lifecycle import launched

    def no_links(*_args: object) -> None:
        raise PermissionError("hard links not supported")

    monkeypatch.setattr(launched, "_won", [])
    monkeypatch.setattr(launched.os, "link", no_links)
    monkeypatch.setenv(launched.CLAIM_ENV, str(tmp_path / "driver"))
    monkeypatch.setenv("LENS_RL_OTEL_ATTEMPT", "0")
    assert launched.claim()
    pid = os.fork()
    if pid == 0:  # another process of the job while the driver lives: a worker
        launched._won[:] = []
        os._exit(0 if not launched.claim() else 1)
    assert os.waitpid(pid, 0)[1] == 0
    assert (tmp_path / "driver").read_text().split()[0] == str(os.getpid())
