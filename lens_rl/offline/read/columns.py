"""One process's spans as flat columns: what the offline reductions read (no object per span).

Of the attributes only what the analysis reads is kept (``rl.bucket``, ``rl.step``, ``rl.num_tokens``,
``rl.flops_per_token``, ``rl.ended_by_shutdown``; none of a profiler capture's ``rl.profile``: its window is not
its own time, :mod:`lens_rl.offline.read.tree`): a run's attribute dicts would be most of its memory. Times are int64 arrays of
ns (a missing or bad value reads as 0); repeated values (names, parent ids, buckets, steps) share one
object. Span and parent ids, 16 hex digits as lens_rl writes them, are kept as numbers in uint64 arrays
(8 bytes a span, not ~70; a missing parent is 0); at the first id of another form the columns switch to
keeping them as they came.

Example::

    for process, cols in read_columns(path).items():
        print(process.group, len(cols.names))
"""

from __future__ import annotations

import os
from array import array
from itertools import compress
from typing import Any

from lens_rl.offline.read.requests import REQUEST_SPAN, TOKENS_MAX, request_numbers
from lens_rl.offline.read.runs import hex_id, hex_ids, run_steps, where_equal, where_true
from lens_rl.offline.read.tree import CAPTURE
from lens_rl.store import INT64_END, OWN_SCOPE, Process, ReadStats, scan_runs, time_ns, unseen

__all__ = ["ENDED_BY_SHUTDOWN", "REMOTE_PARENT", "THIRD_PARTY", "Columns", "read_columns"]

#: :attr:`Columns.flags` bits: the span's parent was carried in from another process; it was ended by a
#: shutdown; its scope is not lens_rl's (another library's span: never a phase).
REMOTE_PARENT = 1
ENDED_BY_SHUTDOWN = 2
THIRD_PARTY = 4
#: Token counts another library's span carries (OpenTelemetry's GenAI conventions, old and new names).
_OUTPUT_TOKENS = ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens")
_INPUT_TOKENS = ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens")

_BUCKET_NAMES = {name: name for name in ("productive", "overhead", "idle", "wasted")}
_OWN_SCOPES = frozenset((None, OWN_SCOPE))
_NO_KEY = (list, dict)  # JSON values that key nothing (a step of these reads as none)


class Columns:
    """One process's spans, column by column (see the module docstring)."""

    __slots__ = (
        "resources",
        "names",
        "ids",
        "parent_ids",
        "starts",
        "ends",
        "buckets",
        "steps",
        "tokens",
        "flops",
        "gen_tokens",
        "versions",
        "flags",
        "requests",
        "root",
        "since",
        "job_error",
        "errors",
        "_shared",
    )

    def __init__(self) -> None:
        self.resources: list[dict[str, Any]] = []
        self.names: list[Any] = []
        self.ids: Any = array("Q")  # a list once an id is not 16 hex digits
        self.parent_ids: Any = array("Q")
        self.starts = array("q")
        self.ends = array("q")
        self.buckets: list[Any] = []
        self.steps: list[Any] = []
        self.tokens: list[Any] = []
        #: row -> its ``rl.flops_per_token`` (few spans set it: kept sparse)
        self.flops: dict[int, float] = {}
        #: row -> (output, input) tokens of a third-party span that says them (``gen_ai.usage.*``), sparse
        self.gen_tokens: dict[int, tuple[float, float]] = {}
        #: row -> (``rl.policy_version``, ``rl.trajectory_versions``, ``rl.trajectory_tokens``,
        #: ``rl.max_staleness``, ``rl.trajectory_counts``) of a phase that says what it consumed (sparse: what
        #: staleness is computed from)
        self.versions: dict[int, tuple[Any, Any, Any, Any, Any]] = {}
        self.flags = bytearray()
        #: row -> a vLLM request span's numbers (:func:`lens_rl.offline.read.requests.request_numbers`; sparse)
        self.requests: dict[int, tuple[float, ...]] = {}
        #: the job root's span id (as the ids are kept), from the file's header: a parent that is no orphan
        self.root: Any = None
        #: the earliest header's ``since`` (ns: no span of the process starts before it), None when absent
        self.since: int | None = None
        #: how the job root ended when it ended in error: {"type", "message"} (from its exception event)
        self.job_error: dict[str, str] | None = None
        #: row -> how a span that ended in error (status ERROR) ended: {"type", "message"} (sparse: a step
        #: umbrella's makes its step failed)
        self.errors: dict[int, dict[str, str]] = {}
        self._shared: dict[Any, Any] = {}

    def add(
        self,
        name: Any,
        span_id: Any,
        parent_id: Any,
        start: Any,
        end: Any,
        attrs: Any,
        remote: Any = None,
        scope: Any = None,
    ) -> None:
        """One span, a row of every column (what :meth:`extend` does a run at a time)."""
        self.names.append(self._shared.setdefault(name, name) if type(name) is str else name)
        self._add_ids(span_id, parent_id)
        try:
            self.starts.append(start)
        except (TypeError, OverflowError):
            self.starts.append(time_ns(start))
        try:
            self.ends.append(end)
        except (TypeError, OverflowError):
            self.ends.append(time_ns(end))
        flag = REMOTE_PARENT if remote is True else 0
        if scope is not None and scope != OWN_SCOPE:
            flag |= THIRD_PARTY
            if attrs:
                self._gen_tokens(attrs)
        if attrs:
            if attrs.get("rl.ended_by_shutdown") is True:
                flag |= ENDED_BY_SHUTDOWN
            self._add_attributes(name, attrs)
        else:
            self.buckets.append(None)
            self.steps.append(None)
            self.tokens.append(None)
        self.flags.append(flag)

    def _add_ids(self, span_id: Any, parent_id: Any) -> None:
        """A span's id and its parent's: as numbers while every id is 16 hex digits, as given from the first
        that is not (the columns switch then)."""
        ids = self.ids
        if type(ids) is array:
            number, parent = hex_id(span_id), 0 if parent_id is None else hex_id(parent_id)
            if not number or not (parent or parent_id is None):  # (0 stands for "no parent": not an id of one)
                self._ids_as_given()
                self._add_given_ids(span_id, parent_id)
            else:
                ids.append(number)
                self.parent_ids.append(parent)
        else:
            self._add_given_ids(span_id, parent_id)

    def _add_attributes(self, name: Any, attrs: Any) -> None:
        """A span's bucket, step and tokens from its attributes (a value of the wrong type reads as none), and
        what the sparse columns keep of it (flops per token, a request's numbers, what it consumed)."""
        bucket, step = attrs.get("rl.bucket"), attrs.get("rl.step")
        if name == CAPTURE:  # a capture's window: not its own time (lens_rl.offline.read.tree)
            bucket = step = None
        self.buckets.append(_BUCKET_NAMES.get(bucket, bucket) if type(bucket) is str else None)  # text or none
        if type(step) is int:
            step = self._shared.setdefault(step, step) if -INT64_END <= step < INT64_END else None  # past int64
        elif type(step) in _NO_KEY:
            step = None
        self.steps.append(step)
        tokens = attrs.get("rl.num_tokens")  # a number (an int within int64), else none
        self.tokens.append(
            tokens if type(tokens) is float or (type(tokens) is int and -INT64_END <= tokens < INT64_END) else None
        )
        flops = attrs.get("rl.flops_per_token")
        if flops is not None:
            self._add_flops(flops, len(self.tokens) - 1)
        if name == REQUEST_SPAN:
            self._add_request(attrs, len(self.tokens) - 1)
        consumed = attrs.get("rl.trajectory_versions")
        if consumed is not None:
            self._add_versions(attrs, consumed, len(self.tokens) - 1)

    def extend(self, rows: list[Any]) -> None:
        """Store rows of this process (:class:`lens_rl.store.Row`, in file order) added as :meth:`add` (and
        :meth:`add_job`) add each, a column at a time: the reads' hot path. A run with a span the fast path
        does not take (an id not of lens_rl's form, another library's span) is added row by row."""
        span_ids, parent_ids = [row.s for row in rows], [row.p for row in rows]
        numbers = hex_ids(span_ids, parent_ids) if type(self.ids) is array else None
        scopes = set(row.sc for row in rows)
        if numbers is None or not scopes <= _OWN_SCOPES:
            for row in rows:
                if row.n == "rl.job":
                    self.add_job(row)
                self.add(row.n, row.s, row.p, row.b, row.e, row.a, row.pr, row.sc)
            self.add_errors(rows, len(self.names) - len(rows))
            return
        try:
            starts, ends = array("q", [row.b for row in rows]), array("q", [row.e for row in rows])
        except (TypeError, OverflowError):  # (the reader checked each time: never, but as add reads it)
            starts = array("q", map(time_ns, [row.b for row in rows]))
            ends = array("q", map(time_ns, [row.e for row in rows]))
        base = len(self.names)
        shared = self._shared.setdefault
        names = [row.n for row in rows]
        self.names += map(shared, names, names)
        self.ids.extend(numbers[0])
        self.parent_ids.extend(numbers[1])
        self.starts.extend(starts)
        self.ends.extend(ends)
        empty: dict[str, Any] = {}
        attrs = [row.a or empty for row in rows]
        flags = bytearray([row.pr is True for row in rows])  # (REMOTE_PARENT is 1)
        for i in where_true([a.get("rl.ended_by_shutdown") for a in attrs]):
            flags[i] |= ENDED_BY_SHUTDOWN
        self.flags += flags
        self.buckets += [
            _BUCKET_NAMES.get(b, b) if type(b) is str else None for b in [a.get("rl.bucket") for a in attrs]
        ]
        self.steps += run_steps([a.get("rl.step") for a in attrs], shared)
        self.tokens += [
            t if type(t) is float or (type(t) is int and -INT64_END <= t < INT64_END) else None
            for t in [a.get("rl.num_tokens") for a in attrs]
        ]
        for i in where_equal(names, CAPTURE):  # a capture's window: not its own time (lens_rl.offline.read.tree)
            self.buckets[base + i] = self.steps[base + i] = None
        for i in where_equal(names, "rl.job"):
            self.add_job(rows[i])
        for i in where_equal(names, REQUEST_SPAN):
            if rows[i].a:
                self._add_request(attrs[i], base + i)
        self._sparse(attrs, base)
        self.add_errors(rows, base)

    def add_errors(self, rows: list[Any], base: int) -> None:
        """The spans of ``rows`` (from row ``base``) that ended in error, into :attr:`errors`."""
        for i in where_equal([row.st for row in rows], "ERROR"):
            self.errors[base + i] = _error_of(rows[i])

    def _sparse(self, attrs: list[dict[str, Any]], base: int) -> None:
        """:meth:`extend`'s columns few rows have (rows from ``base``): ``rl.flops_per_token``, what a phase
        consumed."""
        flops = [a.get("rl.flops_per_token") for a in attrs]
        if flops.count(None) != len(flops):
            for i, value in enumerate(flops):
                if value is not None:
                    self._add_flops(value, base + i)
        consumed = [a.get("rl.trajectory_versions") for a in attrs]
        if consumed.count(None) != len(consumed):
            for i, value in enumerate(consumed):
                if value is not None:
                    self._add_versions(attrs[i], value, base + i)

    def _add_given_ids(self, span_id: Any, parent_id: Any) -> None:
        """A span's ids as they came (the columns keep them so once one is not 16 hex digits)."""
        self.ids.append(span_id)
        self.parent_ids.append(self._shared.setdefault(parent_id, parent_id) if type(parent_id) is str else parent_id)

    def _add_flops(self, flops: Any, row: int) -> None:
        """A span's ``rl.flops_per_token``, where it is a plausible number."""
        if type(flops) in (int, float) and 0 < flops < 1e15:
            self.flops[row] = float(flops)

    def _add_request(self, attrs: dict[str, Any], row: int) -> None:
        """A span's numbers as a vLLM request span, where it has them."""
        numbers = request_numbers(attrs)
        if numbers is not None:
            self.requests[row] = numbers

    def _add_versions(self, attrs: dict[str, Any], consumed: Any, row: int) -> None:
        """What a phase says it consumed (``rl.trajectory_versions`` and the numbers beside it)."""
        self.versions[row] = (
            attrs.get("rl.policy_version"),
            consumed,
            attrs.get("rl.trajectory_tokens"),
            attrs.get("rl.max_staleness"),
            attrs.get("rl.trajectory_counts"),
        )

    def _gen_tokens(self, attrs: dict[str, Any]) -> None:
        """A third-party span's ``gen_ai.usage`` token counts (output, input), where it says any."""
        counts = []
        for keys in (_OUTPUT_TOKENS, _INPUT_TOKENS):
            found = 0.0
            for key in keys:
                value = attrs.get(key)
                if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < TOKENS_MAX:
                    found = float(value)
                    break
            counts.append(found)
        if counts[0] or counts[1]:
            self.gen_tokens[len(self.names) - 1] = (counts[0], counts[1])

    def set_root(self, root: Any) -> None:
        """The job root's span id, as the header gives it (16 hex digits), kept as the ids are."""
        if type(root) is not str:
            return
        if type(self.ids) is array:
            self.root = hex_id(root)
        else:
            self.root = root

    def subset(self, keep: bytearray) -> Columns:
        """A new Columns of the rows ``keep`` marks (1), in their order (the same header facts)."""
        out = Columns()
        out.resources, out.root, out.since, out.job_error = self.resources, self.root, self.since, self.job_error
        out.names = list(compress(self.names, keep))
        out.ids, out.parent_ids = _kept(self.ids, keep), _kept(self.parent_ids, keep)
        out.starts = array("q", compress(self.starts, keep))
        out.ends = array("q", compress(self.ends, keep))
        out.buckets = list(compress(self.buckets, keep))
        out.steps = list(compress(self.steps, keep))
        out.tokens = list(compress(self.tokens, keep))
        if self.flops or self.requests or self.gen_tokens or self.versions or self.errors:
            new_index = {old: new for new, old in enumerate(i for i, k in enumerate(keep) if k)}
            out.errors = _reindexed(self.errors, new_index)
            out.flops = _reindexed(self.flops, new_index)
            out.requests = _reindexed(self.requests, new_index)
            out.gen_tokens = _reindexed(self.gen_tokens, new_index)
            out.versions = _reindexed(self.versions, new_index)
        out.flags = bytearray(compress(self.flags, keep))
        return out

    def add_head(self, head: Any) -> None:
        """A header of this process: its resource, the job root it names, its ``since``."""
        self.resources.append(head.resource)
        self.set_root(head.root)
        since = head.header.get("since")
        if type(since) is int and (self.since is None or since < self.since):
            self.since = since

    def add_job(self, row: Any) -> None:
        """The job root's line: an error it ended with (status ERROR), as its exception event says."""
        if row.st == "ERROR":
            self.job_error = _error_of(row)

    def _ids_as_given(self) -> None:
        """Keep ids as they come from now on (those so far back in lens_rl's 16-hex-digit form)."""
        self.ids = [f"{number:016x}" for number in self.ids]
        self.parent_ids = [f"{number:016x}" if number else None for number in self.parent_ids]
        if self.root is not None:
            self.root = f"{self.root:016x}"


def _error_of(row: Any) -> dict[str, str]:
    """How a span that ended in error ended: {"type", "message"}, as its exception event (else its status
    message) says."""
    error = {"type": "", "message": str(row.sm or "")}
    for event in row.ev or ():
        attrs = event.get("a") if type(event) is dict else None
        if type(attrs) is dict and event.get("n") == "exception":
            error = {"type": str(attrs.get("exception.type", "")), "message": str(attrs.get("exception.message", ""))}
    return error


def _kept(ids: Any, keep: bytearray) -> Any:
    """The ids of the rows ``keep`` marks, kept as ``ids`` keeps them (a uint64 array or a list)."""
    return array("Q", compress(ids, keep)) if type(ids) is array else list(compress(ids, keep))


def _reindexed(sparse: dict[int, Any], new_index: dict[int, int]) -> dict[int, Any]:
    """A sparse column (row -> value) of the rows ``new_index`` keeps, by their new rows."""
    return {new_index[i]: v for i, v in sparse.items() if i in new_index}


def read_columns(path: str | os.PathLike[str], stats: ReadStats | None = None) -> dict[Process, Columns]:
    """One file's spans by process (a re-init under another identity is another), as :class:`Columns`."""
    stats = stats if stats is not None else ReadStats()
    out: dict[Process, Columns] = {}
    last: Any = None
    cols = Columns()
    seen: set[Any] = set()
    for head, rows, _at, _size in scan_runs(path, stats):
        if head is not last:
            last = head
            cols = out.get(head.process) or out.setdefault(head.process, Columns())
            cols.add_head(head)
        repeats, rows, _places = unseen(seen, rows)
        stats.duplicates += repeats
        cols.extend(rows)
    return out
