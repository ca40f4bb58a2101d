"""What the command line names, checked before anything is read: the run folder, its span files, ``--steps``,
``--jobs``. Every refusal is a :class:`CliError` (one line on stderr, exit status 2)."""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import stat
import sys
from pathlib import Path
from typing import Any

__all__ = [
    "CliError",
    "check_steps",
    "check_count",
    "check_jobs",
    "check_seconds",
    "holds",
    "parallel",
    "parse_steps",
    "run_dir",
    "say",
    "span_files_of",
]


class CliError(Exception):
    """A user-facing error: printed as one line, exit status 2."""


#: how :func:`_folder_problem` says a folder that exists but cannot be listed or entered (no permission)
CANNOT_READ = "cannot be read"


def _folder_problem(path: Path) -> str | None:
    """What is wrong with a folder named on the command line, in a few words (None: nothing). A folder this
    process may not list or enter (no permission) is one it cannot read: its files would read as none."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "is a symbolic link loop"
        if exc.errno == errno.ENOENT:
            return "is a dangling symbolic link" if os.path.islink(path) else "does not exist"
        return f"{CANNOT_READ} ({exc.strerror or exc})"
    if not stat.S_ISDIR(mode):
        return "is not a directory"
    try:  # listed (read permission), then entered (search permission: '.' is looked up inside it)
        os.close(os.open(path, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_NONBLOCK", 0)))
        os.stat(os.path.join(path, "."))
    except OSError as exc:
        return f"{CANNOT_READ} ({exc.strerror or exc})"
    return None


def holds(folder: Path, pattern: str) -> bool:
    """Whether ``folder`` has an entry matching ``pattern`` (False where it cannot be listed)."""
    try:
        return any(folder.glob(pattern))
    except OSError:
        return False


def _last_write(folder: Path, pattern: str) -> float:
    """The latest modification of ``folder``'s entries matching ``pattern`` (a link's own, where its target
    cannot be read)."""
    latest = 0.0
    for entry in folder.glob(pattern):
        with contextlib.suppress(OSError):
            latest = max(latest, entry.lstat().st_mtime)
    return latest


def run_dir(trace_dir: str, run: str | None, pattern: str = "spans-*.jsonl") -> Path:
    """The run folder a command reads: ``trace_dir/run`` when ``--run`` names one, ``trace_dir`` itself when
    it holds files matching ``pattern``, else its run folder written last (said on stderr when there are
    several)."""
    root = Path(trace_dir)
    why = _folder_problem(root)
    if why == "does not exist":
        raise CliError(f"{trace_dir!r} does not exist (give the telemetry trace_dir, or one run's folder in it)")
    if why is not None:
        raise CliError(f"{trace_dir!r} {why}")
    folders, unreadable = [], []
    try:
        for entry in sorted(root.iterdir()):
            problem = _folder_problem(entry)
            if problem is None:
                folders.append(entry)
            elif problem.startswith(CANNOT_READ) and os.path.isdir(entry):
                unreadable.append(f"skipped {str(entry)!r}: {problem}")
    except OSError as exc:
        raise CliError(f"{trace_dir!r} cannot be listed ({exc.strerror or exc})") from None
    if run is not None:  # (the runs named when it is missing: folders of the files read, never the cache's)
        return _named_run(trace_dir, run, [p for p in folders if holds(p, pattern)])
    if holds(root, pattern):
        return root
    say(unreadable)  # a run folder it cannot read may be the latest: named, never silently passed over
    return _latest_run(trace_dir, folders, pattern)


def _named_run(trace_dir: str, run: str, folders: list[Path]) -> Path:
    """``--run``'s folder under ``trace_dir`` (``folders``: the readable runs there, named when it is missing).
    A run id is a folder in ``trace_dir``, never one out of it: an absolute path, ``.``, or one through ``..``
    names the folder the writer made for that id (``..`` -> ``run``), so ``lens-rl profile`` never writes its
    request into ``trace_dir`` itself or out of it."""
    parts = Path(run).parts
    path = Path(trace_dir) / run
    if not parts or Path(run).is_absolute() or ".." in parts or not os.path.lexists(path):
        # (the folder lens_rl wrote for that run id: 'exp 1' -> exp_1)
        from lens_rl.store import safe_part

        path = Path(trace_dir) / safe_part(run, "run")
    why = _folder_problem(path)
    if why == "does not exist":
        names = [p.name for p in folders]
        raise CliError(f"no run {run!r} under {trace_dir!r} (runs: {', '.join(names) or 'none'})")
    if why is not None:
        raise CliError(f"the run folder {str(path)!r} {why}")
    return path


def _latest_run(trace_dir: str, folders: list[Path], pattern: str) -> Path:
    """The folder among ``folders`` with the latest file matching ``pattern``."""
    runs = [p for p in folders if holds(p, pattern)]
    if not runs:
        what = "span files" if pattern.startswith("spans") else "heartbeat files"
        raise CliError(f"no lens_rl {what} ({pattern}) under {trace_dir!r}")
    latest = max(runs, key=lambda p: _last_write(p, pattern))
    if len(runs) > 1:
        print(
            f"lens-rl: {len(runs)} runs under {trace_dir}; using the latest, {latest.name} (--run to choose)",
            file=sys.stderr,
        )
    return latest


def say(notes: list[str]) -> None:
    """Notes on what was not read (an entry that is no readable file), one line each on stderr."""
    for note in notes:
        print(f"lens-rl: {note}", file=sys.stderr)


#: the longest duration a command's option takes (a year: longer is no wait a person means; inf would hang)
MOST_SECONDS = 365 * 86400.0


def check_seconds(option: str, value: float) -> float:
    """A duration option (``--interval``, ``--timeout``): a finite number of seconds > 0, at most a year."""
    if not 0 < value <= MOST_SECONDS:  # (nan fails both)
        raise CliError(f"{option}: {value} is not a duration; allowed: seconds > 0, at most {MOST_SECONDS:.0f}")
    return value


def check_count(option: str, value: int) -> int:
    """A count option (``--warmup-steps``): 0 or more."""
    if value < 0:
        raise CliError(f"{option}: {value} is negative; allowed: 0 or more")
    return value


def parse_steps(text: str | None) -> tuple[int, int] | None:
    """``--steps``: ``A-B`` (inclusive) or ``all`` (None); the same everywhere."""
    if text is None or text.strip().lower() == "all":
        return None
    first, sep, last = text.strip().partition("-")
    try:
        lo = int(first)
        hi = int(last) if sep else lo
    except ValueError:
        raise CliError(
            f"--steps: invalid value {text!r}; allowed: A-B (inclusive, e.g. 10-20), a single step, or all"
        ) from None
    if hi < lo:
        raise CliError(f"--steps: {text!r} is empty (B < A); allowed: A-B with A <= B, or all")
    return lo, hi


def span_files_of(trace_dir: str, run: str | None) -> tuple[list[Path], Path]:
    """The run's span files and its folder; a warning on stderr when they are of several runs (files copied
    together)."""
    from lens_rl.store import read_head, span_files

    path = run_dir(trace_dir, run)
    notes: list[str] = []
    paths = span_files(path, notes)
    say(notes)
    runs = set()
    for file in paths:
        head, _ = read_head(file)
        if head is not None and head.resource.get("rl.run_id") is not None:
            runs.add(str(head.resource["rl.run_id"]))
    if len(runs) > 1:
        print(
            f"lens-rl: warning: {str(path)!r} holds spans of {len(runs)} runs ({', '.join(sorted(runs))}); their "
            "figures are mixed (keep one run per folder)",
            file=sys.stderr,
        )
    return paths, path


def check_steps(steps: tuple[int, int] | None, step_range: Any) -> None:
    """``--steps`` that select no step of the run: say which the run has."""
    if steps is not None and step_range is not None and (steps[1] < step_range[0] or steps[0] > step_range[1]):
        raise CliError(
            f"--steps {steps[0]}-{steps[1]} selects no step: the run's steps are {step_range[0]}-{step_range[1]}"
        )


def check_jobs(jobs: int | None) -> int | None:
    """``--jobs``: 1 or more (None: the default)."""
    if jobs is not None and jobs < 1:
        raise CliError(f"--jobs: {jobs} is not a count; allowed: 1 or more")
    return jobs


def parallel(args: argparse.Namespace) -> dict[str, Any]:
    """``--jobs`` and ``--ray`` as the offline tools' keyword arguments."""
    check_jobs(args.jobs)
    return {"jobs": args.jobs, "use_ray": args.ray is not None, "ray_address": args.ray or None}
