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
    assert (tmp_path / "driver").read_text() == f"{os.getpid()} 0\n"
    pid = os.fork()
    if pid == 0:  # the driver's child: never the driver
        os._exit(0 if not launched.claim() and launched.root_ids() is None else 1)
    assert os.waitpid(pid, 0)[1] == 0
    monkeypatch.setattr(launched, "_won", [])
    monkeypatch.setenv(launched.CLAIM_ENV, str(tmp_path / "no-such-folder" / "driver"))
    assert not launched.claim()
