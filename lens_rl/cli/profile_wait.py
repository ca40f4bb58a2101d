"""Whom ``lens-rl profile`` waits for: every live process its request names, until each has answered.

A process is *named* when its heartbeat says it runs (:func:`lens_rl.offline.show.status.run_status`: not
ended, not stale) and it matches the request's ``--group`` / ``--rank``; a process that answered is named too
(it took the request: where the job writes no heartbeats, the answers are all there is to go by). A named
process has *answered* once its answer file covers the request's last step: a capture of it, or a refusal
(``next``: any capture or refusal). One that ends or goes stale meanwhile is not waited for (stale: no
heartbeat for 3 of its intervals and at least :data:`STALE_FLOOR_S`, so a loaded machine's late heartbeat does
not end the wait early; or at once when its pid is dead on this host: ``gone``).

Example::

    names = Named.read(run, group=None, rank=None)        # the live processes the request names
    left = names.waiting(answers(run, request_id), "next")  # [] once each has answered
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["STALE_FLOOR_S", "STARTING_S", "Named", "answered", "key_of", "label", "listed", "refused", "steps_captured"]

#: A process whose heartbeat is stale by status's rule is still waited for until it is this old.
STALE_FLOOR_S = 5.0
#: A run whose running processes none of which the request names is waited for this long (a worker starting).
STARTING_S = 5.0
#: At most this many processes are named in one message (the rest counted).
NAMED_MAX = 10

#: A process: its worker group, rank and pid (as its heartbeat and its answer name it).
Key = tuple[str, int, int]


def key_of(answer: dict[str, Any]) -> Key | None:
    """Who wrote ``answer`` (None: an answer that does not say, written by an earlier version)."""
    group, rank, pid = answer.get("group"), answer.get("rank"), answer.get("pid")
    if isinstance(group, str) and type(rank) is int and type(pid) is int:
        return group, rank, pid
    return None


def steps_captured(answer: dict[str, Any], step: int) -> bool:
    """Does ``answer`` hold a capture of ``step`` (a file ``<group>-<rank>-step<N>.<ext>``)?"""
    return any(isinstance(name, str) and f"-step{step}." in name for name in answer.get("files", []))


def refused(answer: dict[str, Any], last: str | int) -> bool:
    """Did the process of ``answer`` refuse the request's last step (``next``: its step)?"""
    for pair in answer.get("refused", []):
        if isinstance(pair, list) and len(pair) == 2 and all(type(step) is int for step in pair):
            if last == "next" or pair[0] <= int(last) <= pair[1]:
                return True
    return False


def answered(answer: dict[str, Any] | None, last: str | int) -> bool:
    """Has the process of ``answer`` answered the request whose last step is ``last``: captured it or refused
    it (``next``: captured or refused its next step)?"""
    if answer is None:
        return False
    if last == "next":
        return bool(answer.get("files")) or refused(answer, last)
    return steps_captured(answer, int(last)) or refused(answer, last)


def label(key: Key) -> str:
    group, rank, pid = key
    return f"{group} rank {rank} (pid {pid})"


def listed(texts: Sequence[str]) -> str:
    """``texts`` joined, at most :data:`NAMED_MAX` of them (the rest counted)."""
    shown = ", ".join(texts[:NAMED_MAX])
    return shown + (f" and {len(texts) - NAMED_MAX} more" if len(texts) > NAMED_MAX else "")


@dataclass
class Named:
    """The processes of a run a request names, from its heartbeats: ``live`` (running, matching), ``known``
    (every process with a heartbeat of the run's latest attempt) and ``running`` (those of them running)."""

    live: set[Key] = field(default_factory=set)
    known: set[Key] = field(default_factory=set)
    running: set[Key] = field(default_factory=set)

    @classmethod
    def read(cls, run: Path, group: str | None, rank: int | None, now_ns: int | None = None) -> Named:
        from lens_rl.devices.profile_requests import matches
        from lens_rl.offline.show.status import run_status

        named = cls()
        for row in run_status(run, time.time_ns() if now_ns is None else now_ns)["processes"]:
            their_group, their_rank, pid = row["worker_group"], row["rank"], row["pid"]
            if type(their_rank) is not int or type(pid) is not int:
                continue
            key = (str(their_group), their_rank, pid)
            named.known.add(key)
            age = row["heartbeat_age_s"]
            live = row["state"] == "running" or (
                row["state"] == "stale" and not row["gone"] and isinstance(age, (int, float)) and age < STALE_FLOOR_S
            )
            if live:
                named.running.add(key)
            if live and matches({"group": group, "rank": rank}, key[0], their_rank):
                named.live.add(key)
        return named

    def waiting(self, got: Iterable[dict[str, Any]], last: str | int) -> list[tuple[str, dict[str, Any] | None]]:
        """The processes still to answer, each as its label and its answer so far (None: it has not taken the
        request): the live named ones, and those that took it with no heartbeat of theirs at all."""
        by_key: dict[Key, dict[str, Any]] = {}
        left: list[tuple[str, dict[str, Any] | None]] = []
        for answer in got:
            key = key_of(answer)
            if key is None:
                if not answered(answer, last):
                    left.append(("a process (its answer names no pid)", answer))
                continue
            by_key[key] = answer
        for key in sorted(self.live | (set(by_key) - self.known)):
            if not answered(by_key.get(key), last):
                left.append((label(key), by_key.get(key)))
        return left

    def nobody(self, group: str | None, rank: int | None, waited_s: float) -> str | None:
        """Why no process will answer (None: one may): the run's heartbeats say every process ended or went
        quiet, or (after :data:`STARTING_S` of waiting, for a worker still starting) none running is named by
        ``group`` / ``rank``. A run with no heartbeat at all is waited for (a job not begun yet)."""
        if not self.known or self.live:
            return None
        if not self.running:
            return f"no process of the run is running ({len(self.known)} ended or went quiet)"
        if waited_s < STARTING_S:
            return None
        named = " ".join(
            part for part in (f"--group {group}" if group else "", f"--rank {rank}" if rank is not None else "") if part
        )
        return f"no running process matches {named}; running: {listed([label(key) for key in sorted(self.running)])}"

    def gone(self, got: Iterable[dict[str, Any]], last: str | int) -> list[str]:
        """The processes that took the request and ended or went stale before they answered."""
        out = []
        for answer in got:
            key = key_of(answer)
            if key is not None and key in self.known and key not in self.live and not answered(answer, last):
                out.append(label(key))
        return sorted(out)
