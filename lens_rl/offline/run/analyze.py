"""Every pass over the span files, in one place: the goodput report of a store (:func:`analyze`), read in
bounded memory, one file per worker at a time (in this process, forked workers or Ray: identical results),
through the refresh cache when one is given. The rule that rolls the parts up is
:mod:`lens_rl.offline.rollup.goodput`'s.

Example::

    report = analyze(span_files("lens_traces/run42"))
    print(report["goodput"], report["steady_state_goodput"])
"""

from __future__ import annotations

import logging
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from lens_rl.offline.read.crosslinks import cross_cut
from lens_rl.offline.read.parts import ProcessPart, share_steps
from lens_rl.offline.read.reduce import file_steps
from lens_rl.offline.rollup.attempts import superseded_steps
from lens_rl.offline.rollup.goodput import report_from_parts
from lens_rl.offline.rollup.schema import GoodputReport
from lens_rl.offline.rollup.selected import cut_gpu, cut_gpu_steps
from lens_rl.offline.run.cache import (
    grown_bytes,
    load_memo,
    load_report,
    read_parts,
    save_memo,
    save_report,
    save_sizes,
    store_fingerprint,
)
from lens_rl.offline.run.gpu import gpu_join, gpu_read, sample_files, with_gpu
from lens_rl.offline.run.gpu_ahead import Columns, join_ahead, read_ahead
from lens_rl.offline.run.index import Index
from lens_rl.offline.run.parallel import map_files, no_gc
from lens_rl.offline.run.pipe_memo_file import load_pipe_memo, save_pipe_memo
from lens_rl.offline.run.records import UNENCODABLE, PartRec, decode, encode, part_from, part_record
from lens_rl.store import ReadStats, read_head

__all__ = ["SMALL_REFRESH", "analyze", "analyze_parts", "rolled_up"]

_log = logging.getLogger("lens_rl")


#: bytes new since the last look under which a look through the refresh cache reads in this process
#: (measured, 1 M spans, +1 %: worker processes made it 1.06 s against 0.88 s here: each file's settled parts
#: travel back to this process, which costs what reading its cache entry here does)
SMALL_REFRESH = 32 << 20


def analyze_parts(
    paths: Sequence[Path],
    *,
    jobs: int | None = None,
    use_ray: bool = False,
    ray_address: str | None = None,
    critical: bool = True,
    cache: str | None = None,
    phase_steps: bool = True,
) -> tuple[list[ProcessPart], ReadStats]:
    """Every span file reduced to process parts, one file per worker at a time (identical whatever ``jobs``);
    ``phase_steps`` False: the parts' phases per step (what only ``--steps A-B`` reads) may be left out where
    the refresh cache kept them (:func:`~lens_rl.offline.run.cache.read_parts`).

    Whether the run has a driver is read from the files' headers (a driver's file with no span line is none,
    and said so); which file is whose is never read from its name."""
    parts: list[ProcessPart] = []
    stats = ReadStats()
    index = Index(cache)  # (each file's headers and steps: scanned only where it grew since the last look)
    attempts, driven, driver_in_run = _attempts(paths, index, stats.notes)
    if jobs is None and cache is not None and not use_ray and grown_bytes(cache, paths) <= SMALL_REFRESH:
        jobs = 1  # (a look at little that is new: worker processes would cost more than they save)
    options: dict[str, Any] = {"jobs": jobs, "use_ray": use_ray, "ray_address": ray_address}
    superseded = _superseded(paths, frozenset(driven), index, options) if len(attempts) > 1 else {}
    steps_seen: dict[bytes, Any] = {}
    here = jobs == 1 and not use_ray  # (else the parts travel back as their records: read_parts_sent)
    with no_gc():
        for sent, file_stats in map_files(
            read_parts if here else read_parts_sent,
            paths,
            driver_in_run,
            superseded,
            critical,
            cache,
            phase_steps,
            desc="goodput",
            **options,
        ):
            file_result = sent if here else parts_received(sent)
            for part in file_result:
                share_steps(part, steps_seen)
            parts.extend(file_result)
            stats.add(file_stats)
    if cache is not None:
        save_sizes(cache, paths)
        index.save()
    return parts, stats


def read_parts_sent(
    path: str | os.PathLike[str],
    driver_in_run: bool = False,
    superseded: Mapping[int, frozenset[Any]] | None = None,
    critical: bool = True,
    cache: str | None = None,
    phase_steps: bool = True,
) -> tuple[bytes | list[ProcessPart], ReadStats]:
    """:func:`read_parts` in a worker process (``--jobs``, ``--ray``): its parts as their records, encoded,
    for the trip back (a few buffers per part, not an object per step); as they are where a value is one the
    records cannot hold. :func:`parts_received` makes them parts again."""
    parts, stats = read_parts(path, driver_in_run, superseded, critical, cache, phase_steps)
    try:
        return encode([part_record(part) for part in parts]), stats
    except UNENCODABLE:  # (an int past 64 bits, say)
        return parts, stats


def parts_received(sent: bytes | list[ProcessPart]) -> list[ProcessPart]:
    """The parts :func:`read_parts_sent` sent."""
    if isinstance(sent, list):
        return sent
    return [part_from(rec) for rec in decode(sent, list[PartRec])]


def _attempts(paths: Sequence[Path], index: Index, notes: list[str]) -> tuple[set[int], set[int], bool]:
    """The run's attempts, those with a driver file that has spans, and whether there is one (read from the
    files' headers: their first, and every header of a driver's file: a driver restarted under the same pid
    appends to it); a driver file with no span line is none, and ``notes`` says so."""
    attempts: set[int] = set()
    driven: set[int] = set()
    driver_in_run = False
    for path in paths:
        head, has_spans = read_head(path)
        if head is None:
            continue
        attempts.add(head.process.attempt)
        if head.process.driver and has_spans:
            driver_in_run = True
            later = index.heads(path)
            driven.update(h.process.attempt for h in later if h.process.driver)
            attempts.update(h.process.attempt for h in later)
        elif head.process.driver:
            notes.append(
                f"{Path(path).name}: a driver file with no spans (the driver was killed before "
                "its first export?); read as no driver file: the job view sums every process"
            )
    return attempts, driven, driver_in_run


def _cache_notes(notes: Sequence[str]) -> None:
    """The cache files a look did not use, said once on stderr (the report is the same either way)."""
    if notes:
        _log.warning(
            "lens-rl: %d cache file(s) not used (%s%s): read cold",
            len(notes),
            notes[0],
            ", ..." if len(notes) > 1 else "",
        )


def _superseded(
    paths: Sequence[Path], driven: frozenset[int], index: Index, options: Mapping[str, Any]
) -> dict[int, frozenset[Any]]:
    """attempt -> its steps a later attempt ran again, in a run of several attempts: the steps of each
    attempt's view (its driver's, or every process's of an attempt without a driver file), before the files
    are reduced: through the ``index`` where a cache keeps one (only what is new is read), else read again."""
    steps: dict[int, set[Any]] = defaultdict(set)
    if index.folder is not None:
        found: Iterable[dict[int, set[Any]]] = (index.steps(path, driven) for path in paths)
    else:
        found = map_files(file_steps, paths, driven, desc="attempts", **options)
    for each in found:
        for attempt, values in each.items():
            steps[attempt] |= values
    return superseded_steps(steps)


def rolled_up(
    parts: Iterable[ProcessPart],
    stats: ReadStats,
    cache: str | None,
    selected: dict[str, Any] | None = None,
    **options: Any,
) -> GoodputReport:
    """:func:`report_from_parts` of what :func:`analyze_parts` read, the critical path's per-step results and
    the pipeline's coverage of each step kept in the refresh cache's folder ``cache`` between looks (None:
    computed afresh, nothing kept)."""
    memo = pipe = None
    with no_gc():  # (the memo's and the report's many small objects, beside the parts' millions)
        if cache is not None:
            memo, why = load_memo(cache, stats.cache_reads)
            if why is not None:
                stats.cache_notes.append(f"the critical path's: {why}")
            pipe, why = load_pipe_memo(cache, stats.cache_reads)
            if why is not None:
                stats.cache_notes.append(f"the pipeline's: {why}")
        _cache_notes(stats.cache_notes)
        report = report_from_parts(
            parts,
            files=stats.files,
            skipped_lines=stats.skipped,
            notes=stats.notes,
            memo=memo,
            pipe_memo=pipe,
            cut_links=cross_cut,
            selected=selected,
            **options,
        )
    if cache is not None and memo is not None:
        save_memo(cache, stats.cache_reads, memo)
    if cache is not None and pipe is not None:
        save_pipe_memo(cache, stats.cache_reads, pipe)
    return report


def analyze(
    paths: Sequence[Path],
    *,
    jobs: int | None = None,
    use_ray: bool = False,
    ray_address: str | None = None,
    critical: bool = True,
    cache: str | None = None,
    **options: Any,
) -> GoodputReport:
    """The report for these span files, read in bounded memory (see :func:`analyze_parts`); ``critical``
    False leaves the critical path out (its ``phases`` and ``steps`` empty); ``cache``: the refresh cache's
    folder (:func:`lens_rl.offline.run.cache.cache_folder`), or None to read cold."""
    fingerprint = why = None
    if cache is not None:  # an unchanged store: the report kept for it (its sample files too)
        fingerprint = store_fingerprint([*paths, *sample_files(paths)[0]], (critical, sorted(options.items(), key=str)))
        kept, why = load_report(cache, fingerprint)
        if kept is not None:
            return cast(GoodputReport, kept)
    steps = options.get("steps")
    # (the sample files read while the span files are; under --steps every sample: the join is cold)
    ahead = read_ahead(paths, cache, jobs, window=steps is None)
    parts, stats = analyze_parts(
        paths,
        jobs=jobs,
        use_ray=use_ray,
        ray_address=ray_address,
        critical=critical,
        cache=cache,
        phase_steps=options.get("steps") is not None,  # (read by --steps A-B alone)
    )
    if why is not None:  # (a kept report damaged or another's: said with the cache's other notes)
        stats.cache_notes.insert(0, why)
    if steps is None:
        joining = join_ahead(paths, parts, stats, cache, jobs, ahead)  # (joined while the rollup merges the parts)
        report = with_gpu(rolled_up(parts, stats, cache if critical else None, **options), joining.result())
    else:
        report = _selected_gpu(paths, parts, stats, cache if critical else None, jobs, ahead, options)
    if cache is not None and fingerprint is not None and not _grew(stats):
        save_report(cache, fingerprint, report)
    return report


def _selected_gpu(
    paths: Sequence[Path],
    parts: Sequence[ProcessPart],
    stats: ReadStats,
    cache: str | None,
    jobs: int | None,
    ahead: Any,
    options: dict[str, Any],
) -> GoodputReport:
    """``--steps A-B``: the report over the selected steps, its GPU section joined to the spans of their
    complete steps alone, its device rows and GPU goodput over their walls (as if the job had only those
    steps; joined cold: what the cache keeps of a join is the whole job's)."""
    found, devices = gpu_read(paths, stats, cache, jobs, ahead)
    columns = [Columns(p.key, p.gpu, p.device) for p in parts if p.gpu is not None]  # (before the merge)
    selected: dict[str, Any] = {}
    report = rolled_up(parts, stats, cache, selected=selected, **options)
    if not found or not devices:
        return report
    cut = [c._replace(gpu=cut_gpu(c.gpu, selected.get("steps", ()))) for c in columns]
    look = gpu_join(found, devices, [c for c in cut if c.gpu is not None], None, selected.get("walls", []))
    return cut_gpu_steps(with_gpu(report, look), options["steps"])


def _grew(stats: ReadStats) -> bool:
    """Whether this look found a file grown since an earlier look read it: a store seen growing (a live
    run, a ``watch``) is looked at again grown, so its whole answer is not kept (the next look could not use
    it); a first look, or one that found nothing new, keeps it for the looks at a store that stopped."""
    return any(before is not None and after != before for _name, before, after, _fresh in stats.cache_reads)
