"""GRPO-shaped span stores in the v2 file store, for the offline benchmarks (``scale.py``) and tests.

:func:`synthesize` writes a run of one attempt: one driver file, the rest worker files; per step a driver
umbrella with its phases, and on each worker a bucketed phase called from the driver plus a nested child.
:func:`synthesize_attempts` writes a resumed job of several attempts, as lens_rl's file store records one:
every process's header carries its attempt (``rl.attempt``, what ``LENS_RL_OTEL_ATTEMPT`` sets); the driver
is restarted under the same pid, so each later attempt appends a new header and its spans to the same
driver file; the workers of each attempt are new processes writing new files. Each later attempt resumes
a few steps before where the previous one stopped (those steps are superseded: run again), after a minute
of downtime. :func:`append_steps` and :func:`append_attempt_steps` add steps as a running job writes them.
A :class:`Shape` lays the workers out: in one group (the default) or several (``lm_policy``, ``rollout``), each
worker writing per step one phase and one or more spans under it (:func:`shape_for`: the shape of a store of
so many steps).

Example::

    synthesize(Path("/tmp/one"), 100_000, 50)                 # /tmp/one/run/spans-*.jsonl
    synthesize_attempts(Path("/tmp/three"), 100_000, 50)      # three attempts, 1 + 3 x 49 files
    shape = shape_for(1_000_000, 50, 4000, groups=2)            # a driver and two worker groups
    synthesize(Path("/tmp/steps"), per_step(50, shape) * 4000, 50, shape=shape)     # 4,000 steps
"""

from __future__ import annotations

import contextlib
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import IO, NamedTuple

PHASES = [
    ("generation", "productive"),
    ("logprob", "productive"),
    ("policy_training", "productive"),
    ("weight_sync", "overhead"),
    ("wait", "idle"),
]

T0 = 1_700_000_000_000_000_000
TRACE = "ab" * 16
STEP_NS = 10_000_000_000
DOWNTIME_NS = 60_000_000_000  # between one attempt's last step and the next attempt's first
#: worker groups (in order: worker i is in group (i - 1) % groups): its name, its phase, the driver phase it is
#: called from (None: the driver phase w % 5, as one group always was)
GROUPS = [("lm_policy", "policy_training", None), ("rollout", "generation", 0)]


class Shape(NamedTuple):
    """How a store's workers are laid out: ``groups`` worker groups (of :data:`GROUPS`), each worker writing per
    step one phase (a remote child of a driver phase) with ``children`` spans under it (the last an idle
    barrier, those before it productive micro-batches)."""

    groups: int = 1
    children: int = 1


#: the default shape: one worker group, one span under each worker's phase
ONE_GROUP = Shape()


def shape_for(spans: int, files: int, steps: int | None = None, groups: int = 1) -> Shape:
    """The shape of about ``spans`` spans over ``files`` files in ``steps`` steps (None: one span under each
    worker's phase, as many steps as that makes); ValueError: one that no shape makes (1 to 14 spans under each
    worker's phase, at most as many groups as :data:`GROUPS`, one worker each at least)."""
    if not 1 <= groups <= min(len(GROUPS), max(files - 1, 1)):
        raise ValueError(f"{groups} worker groups over {files - 1} workers: 1 to {len(GROUPS)}, one worker each")
    if steps is None:
        return Shape(groups)
    children = round((spans / max(steps, 1) - 1 - len(PHASES)) / max(files - 1, 1)) - 1
    if not 1 <= children <= 14:
        raise ValueError(f"{spans} spans in {steps} steps over {files} files: {children} spans under a phase")
    return Shape(groups, children)


def _line(
    name: str,
    span: str,
    parent: str | None,
    start: int,
    end: int,
    attrs: dict,
    remote: bool = False,
    trace: str = TRACE,
) -> str:
    row = {
        "n": name,
        "t": trace,
        "s": span,
        "b": start,
        "e": end,
        "a": attrs,
        "th": 140000000000000,
        "tn": "MainThread",
    }
    if parent:
        row["p"] = parent
        if remote:  # (a parent in another process: the driver's)
            row["pr"] = True
    return json.dumps(row, separators=(",", ":"))


def _pid(i: int, attempt: int) -> int:
    """The pid of process ``i`` (0: the driver, which keeps its pid across attempts) in ``attempt``."""
    return 1000 + i + (1000 * attempt if i else 0)


def _group(i: int, files: int, shape: Shape) -> tuple[str, int, int]:
    """Process ``i``'s worker group (0: the driver), its rank in it and the group's size."""
    if i == 0:
        return "driver", 0, max(files - 1, 1) if shape.groups == 1 else 1
    g = (i - 1) % shape.groups
    return GROUPS[g][0], (i - 1) // shape.groups, len(range(g, files - 1, shape.groups))


def _paths(run: Path, files: int, attempt: int = 0, shape: Shape = ONE_GROUP) -> list[Path]:
    out = []
    for i in range(files):
        group, rank, _ = _group(i, files, shape)
        out.append(run / f"spans-{group}-{rank}-{_pid(i, attempt)}.jsonl")
    return out


def _header(i: int, files: int, attempt: int | None, since: int, shape: Shape = ONE_GROUP) -> str:
    """Process ``i``'s header line (``attempt`` None: a run that names no attempt, as a first one may not)."""
    group, rank, size = _group(i, files, shape)
    resource = {
        "service.name": "lens-rl",
        "rl.worker_group": group,
        "nv.dl.rank": rank,
        "nv.dl.world_size": size,
        "process.pid": _pid(i, attempt or 0),
        "host.name": "node-0",
        "rl.run_id": "run",
        "rl.algorithm": "grpo",
        "nv.dl.campaign.stage": "RL",
        "rl.model.name": "tiny-policy",
        "rl.precision": "bfloat16",
    }
    if attempt is not None:
        resource["rl.attempt"] = attempt
    header = {
        "v": 2,
        "header": True,
        "format": "lens_rl.spans/2",
        "kind": "spans",
        "role": "driver" if i == 0 else "worker",
        "resource": resource,
        "pid": _pid(i, attempt or 0),
        "since": since,
        "remote_parents": True,
    }
    if i == 0:
        header["root"] = _root(attempt or 0)  # the job root (never written: the attempt never ended cleanly)
    return json.dumps(header) + "\n"


def _root(attempt: int) -> str:
    return "e" * 16 if attempt == 0 else f"e{attempt:015x}"


def per_step(files: int, shape: Shape = ONE_GROUP) -> int:
    """The spans of one step over ``files`` files: the driver's umbrella and phases, and per worker its phase
    and the spans under it."""
    return 1 + len(PHASES) + max(files - 1, 1) * (1 + shape.children)


def steps_of(spans: int, files: int, shape: Shape = ONE_GROUP) -> int:
    """How many steps make about ``spans`` spans over ``files`` files."""
    return max(spans // per_step(files, shape), 1)


def synthesize(root: Path, spans: int, files: int, seed: int = 0, shape: Shape = ONE_GROUP) -> int:
    """Write about ``spans`` spans in ``files`` process files under ``root/run``; returns the number written."""
    run = root / "run"
    run.mkdir(parents=True)
    for i, path in enumerate(_paths(run, files, 0, shape)):
        path.write_text(_header(i, files, None, T0, shape))
    return append_steps(root, files, 0, steps_of(spans, files, shape), seed, shape)


def append_steps(root: Path, files: int, first: int, count: int, seed: int = 0, shape: Shape = ONE_GROUP) -> int:
    """Append steps ``first`` .. ``first + count - 1`` to every file, as the job writes them (a span when it
    ends, children first); returns the spans written."""
    with _open(_paths(root / "run", files, 0, shape)) as handles:
        return _write_steps(handles, first, count, seed, shape=shape)


@contextlib.contextmanager
def _open(paths: list[Path]) -> Iterator[list[IO[str]]]:
    """``paths`` opened for appending, closed together."""
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(path.open("a")) for path in paths]


def _write_steps(
    handles: list[IO[str]],
    first: int,
    count: int,
    seed: int,
    attempt: int = 0,
    origin: int = 0,
    start: int = T0,
    shape: Shape = ONE_GROUP,
) -> int:
    """Steps ``first`` .. ``first + count - 1`` of ``attempt`` (whose step ``origin`` began at ``start``)
    written to ``handles`` (the driver's first); the spans written. Attempt 0's ids and times are those
    :func:`synthesize` always wrote; a later attempt's ids differ (its re-run steps are new spans)."""
    rng = random.Random(seed + first)
    files = len(handles)
    lead = f"{0xD - attempt:x}"  # driver ids: "d", "c", "b"... by attempt; workers' start with "00"
    trace = TRACE if attempt == 0 else f"{attempt:02x}{TRACE[2:]}"
    written = 0
    for step in range(first, first + count):
        base = start + (step - origin) * STEP_NS
        umbrella = f"{lead}{step:07x}ffffffff"
        for k, (name, bucket) in enumerate(PHASES):
            span = f"{lead}{step:07x}{k + 1:08x}"
            begin = base + k * 1_800_000_000
            attrs = {"rl.bucket": bucket, "rl.step": step}
            handles[0].write(_line(name, span, umbrella, begin, begin + 1_700_000_000, attrs, trace=trace) + "\n")
            written += 1
        row = _line("step", umbrella, _root(attempt), base, base + 9_000_000_000, {"rl.step": step}, trace=trace)
        handles[0].write(row + "\n")
        written += 1
        for w in range(1, files):
            _, phase_name, called_from = GROUPS[(w - 1) % shape.groups]
            parent = f"{lead}{step:07x}{(w % len(PHASES) if called_from is None else called_from) + 1:08x}"
            begin = base + rng.randrange(0, 1_000_000_000)
            dur = int((1.5 if w == 3 and step % 2 else 1.0) * 1_000_000_000)
            span = f"{w:04x}{step:08x}{attempt:03x}1"
            slice_ns = (dur - 100_000_000) // max(shape.children - 1, 1)
            for j in range(shape.children - 1):  # (micro-batches before the barrier, as many as the shape says)
                at = begin + j * slice_ns
                attrs = {"rl.bucket": "productive", "rl.step": step}
                row = _line("microbatch", f"{w:04x}{step:08x}{attempt:03x}{j + 3:x}", span, at, at + slice_ns, attrs)
                handles[w].write(row + "\n")
                written += 1
            child = _line(
                "barrier",
                f"{w:04x}{step:08x}{attempt:03x}2",
                span,
                begin + dur - 100_000_000,
                begin + dur,
                {"rl.bucket": "idle", "rl.step": step},
                trace=trace,
            )
            phase = _line(
                phase_name,
                span,
                parent,
                begin,
                begin + dur,
                {"rl.bucket": "productive", "rl.step": step, "rl.num_tokens": 4096},
                True,
                trace,
            )
            handles[w].write(child + "\n" + phase + "\n")
            written += 2
    return written


class Attempt(NamedTuple):
    """One attempt of a synthesized job: its first step, how many steps it ran, when its first began (ns)."""

    first: int
    steps: int
    start: int


def attempt_plan(spans: int, files: int, attempts: int = 3, rerun: int = 5, shape: Shape = ONE_GROUP) -> list[Attempt]:
    """How :func:`synthesize_attempts` lays out about ``spans`` spans (re-runs included) over ``attempts``:
    each later attempt resumes ``rerun`` steps before where the previous one stopped."""
    if not 1 <= attempts <= 8:
        raise ValueError(f"{attempts} attempts: 1 to 8 (a driver id starts with d, c, b... by attempt)")
    total = steps_of(spans, files, shape)
    each = max(total // attempts, rerun + 1)
    plan: list[Attempt] = []
    first, start = 0, T0
    for a in range(attempts):
        count = each if a < attempts - 1 else max(total - each * (attempts - 1), rerun + 1)
        plan.append(Attempt(first, count, start))
        first += count - rerun
        start += (count - 1) * STEP_NS + 9_000_000_000 + DOWNTIME_NS
    return plan


def synthesize_attempts(
    root: Path, spans: int, files: int, attempts: int = 3, rerun: int = 5, seed: int = 0, shape: Shape = ONE_GROUP
) -> int:
    """Write a resumed job of ``attempts`` attempts, about ``spans`` spans in all, under ``root/run`` (see the
    module docstring): the driver in one file (a header per attempt), ``files - 1`` worker files per attempt;
    returns the spans written."""
    run = root / "run"
    run.mkdir(parents=True)
    written = 0
    for a, (first, count, start) in enumerate(attempt_plan(spans, files, attempts, rerun, shape)):
        paths = _paths(run, files, a, shape)
        with paths[0].open("a") as handle:
            handle.write(_header(0, files, a, start, shape))
        for i, path in enumerate(paths[1:], 1):
            path.write_text(_header(i, files, a, start, shape))
        with _open(paths) as handles:
            written += _write_steps(handles, first, count, seed, a, first, start, shape)
    return written


def append_attempt_steps(
    root: Path,
    spans: int,
    files: int,
    count: int,
    attempts: int = 3,
    rerun: int = 5,
    seed: int = 1,
    shape: Shape = ONE_GROUP,
) -> int:
    """Append ``count`` more steps to the last attempt of what :func:`synthesize_attempts` wrote (its driver's
    file and its workers' files), as it goes on running; the spans written."""
    plan = attempt_plan(spans, files, attempts, rerun, shape)
    last = plan[-1]
    with _open(_paths(root / "run", files, attempts - 1, shape)) as handles:
        first = last.first + last.steps
        return _write_steps(handles, first, count, seed, attempts - 1, last.first, last.start, shape)
