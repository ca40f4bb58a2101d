"""The phase engine: opening and closing phase spans by token, and crediting their time.

Opening a phase returns a :class:`Node`, the token that closing needs; nothing is
looked up to close it. A ``with`` block keeps its token on a per-context stack
(:data:`lens_rl._runtime.ACTIVE`: threads and asyncio tasks never see each other's),
owned by the object whose ``__enter__`` made it. Every open node is also in the
runtime's table by span id, so shutdown can end it, and so a phase finds its
in-process parent (across threads too, through the OpenTelemetry context) to credit
its time exclusively with :func:`lens_rl.buckets.exclusive_time`, the rule the
offline rollup uses. Closing restores the context first, whatever else fails.
This module imports OpenTelemetry only inside the functions that run while on.
"""

from __future__ import annotations

import time
from threading import get_ident
from typing import Any

from lens_rl._errors import internal_error
from lens_rl._runtime import ACTIVE, AMBIENT, RUNTIME
from lens_rl.buckets import COMPUTE_BUCKETS, Bucket, exclusive_time, kind_of
from lens_rl.propagation import carried_in, phase_parent, runtime_context, under
from lens_rl.record.spans import NOOP_SPAN, PhaseSpan, record_exception, safe_str
from lens_rl.record.steps import end_step
from lens_rl.record.umbrellas import UMBRELLAS, umbrella_parent

__all__ = ["Node", "close_node", "enter_with", "exit_with", "open_node", "started"]

#: How long a step boundary may wait for ``flush_on_step`` (a hung collector costs a step at most this).
FLUSH_ON_STEP_MAX_MS = 1000


#: The buckets of a worker's compute (``steps: auto``'s per-step tally).
_COMPUTE = frozenset(Bucket(value) for value in COMPUTE_BUCKETS)


class Node:
    """One open phase: the token that closing it needs."""

    __slots__ = (
        "name",
        "span",
        "span_id",
        "otel_token",
        "bucket",
        "start_ns",
        "inner",
        "outer",
        "step_flush",
        "owner",
        "prev",
        "step",
        "step_node",
        "step_seconds",
        "step_spans",
        "thread",
        "hang",
        "consumed",
    )

    def __init__(
        self,
        name: str,
        span: Any,
        span_id: int,
        otel_token: Any,
        bucket: Bucket | None,
        start_ns: int,
        parent: Node | None,
        umbrella: bool,
        step: Any,
    ) -> None:
        self.name = name
        self.span = span
        self.span_id = span_id
        self.otel_token = otel_token
        self.bucket = bucket
        self.start_ns = start_ns
        #: Intervals of the nearest bucketed descendants, appended as they end (any thread).
        self.inner: list[tuple[int, int]] = []
        #: The nearest bucketed ancestor open in this process, which this phase's time is taken from.
        self.outer: Node | None = None if parent is None else parent if parent.bucket is not None else parent.outer
        #: a step umbrella (a phase with its own rl.step and no bucket): its close is a step boundary
        self.step_flush = umbrella
        self.owner: Any = None
        self.prev: Node | None = None
        #: The step this phase belongs to, and the open step umbrella (a phase with its own rl.step
        #: and no bucket) whose per-bucket seconds it adds to: what ``step_goodput()`` reports.
        self.step: Any = step
        self.step_node: Node | None = self if umbrella else None if parent is None else parent.step_node
        self.step_seconds: dict[str, float] | None = {} if umbrella else None
        #: a step umbrella's bucketed phases while it is open, (start, end, bucket, inner, name, exclusive s)
        #: each: their time over the wall and their metrics, counted when it closes (None once closed)
        self.step_spans: list[tuple[Any, ...]] | None = [] if umbrella else None
        #: the thread that opened it (what a heartbeat and a hang warning name)
        self.thread = get_ident()
        #: set by the hang watchdog when it suspected a hang: (age s, timeout s) at that moment
        self.hang: tuple[float, float] | None = None
        #: what it said it consumed (``trajectory_versions=``): (policy version, versions, tokens, bound, counts:
        #: its histogram, :mod:`lens_rl.record.consumed`); on a step umbrella, its phases' as (step, policy
        #: version, versions, tokens, bound, counts) for the step's staleness
        self.consumed: Any = None


def resolve_bucket(spec: Any, carried_bucket: str | None = None) -> Bucket | None:
    """Explicit > innermost local ``with_bucket`` > the bucket the caller's context carried > default for the name."""
    bucket = spec.bucket
    if bucket is None:
        ambient = AMBIENT.get()
        if ambient is not None:
            return ambient[0]  # type: ignore[no-any-return]
        if carried_bucket is not None:
            bucket = _BUCKETS.get(carried_bucket)
        if bucket is None:
            bucket = spec._default
    return bucket  # type: ignore[no-any-return]


_BUCKETS = {b.value: b for b in Bucket}


def open_node(spec: Any, start_ns: int | None = None, parent_ctx: Any = None, attach: bool = True) -> Node | None:
    """Open ``spec``'s span and make it current; None when telemetry turns out to be off. Never raises.

    ``start_ns`` (``time.time_ns``): when it began, if read before this call (a woven framework timer reads
    it right beside the framework's own clock). ``parent_ctx``: the context it starts under, passed explicitly
    (default: the phase's own parent, else the current context, else the job root). ``attach=False`` opens it
    without making it current (a timer's ``start`` whose ``stop`` may come from another thread, or out of
    order): the node holds no context token, so closing it, from any thread, restores nothing."""
    try:
        handle = started(spec)
        if handle is None:
            return None
        if parent_ctx is None:
            if spec.parent is not None:
                parent_ctx = spec._parent()
            elif UMBRELLAS:  # a framework's step is open on some thread, not current: inside it, its child
                parent_ctx = umbrella_parent()
        parent_ctx, parent_span, baggage = phase_parent(parent_ctx)
        carried_bucket, carried_step = carried_in(baggage)
        stepless = spec.stepless  # a worker's start-up: in no step, whatever step its caller carried
        if stepless:
            carried_step = None
        bucket = resolve_bucket(spec, carried_bucket)
        attributes = spec._attributes(bucket)
        own_step = attributes.get("rl.step")
        if own_step is None and carried_step is not None:
            attributes["rl.step"] = carried_step  # the caller's step, recorded unless the phase sets its own
        parent_node = RUNTIME.open_phases.get(parent_span[1])  # (a SpanContext is a tuple: [1] is its span id)
        version = RUNTIME.weight_version
        if version is not None and kind_of(spec.name) == "generation":  # what it generates with
            attributes["rl.weight_version"] = version
        step = own_step if own_step is not None else carried_step
        hook = RUNTIME.step_hook
        if hook is not None and (bucket is not None or own_step is None):
            if step is not None and step != hook.step:  # a first phase of a new step: before it starts
                hook.boundary(step, parent_ctx)
        if start_ns is None:
            start_ns = time.time_ns()
        fast = handle.fast
        if fast is not None:  # the common case: no SDK span on the phase's thread
            # spans of one phase object, bucket, step (and weight version) start with equal names and
            # attributes: exporters encode those once (a template) for as long as the span keeps them
            shape = (spec, bucket, attributes.get("rl.step"), attributes.get("rl.weight_version"))
            span = fast.start(spec.name, parent_span, attributes, start_ns, shape, parent_ctx)
        else:
            span = handle.tracer.start_span(spec.name, context=parent_ctx, attributes=attributes, start_time=start_ns)
        token = runtime_context().attach(under(parent_ctx, span, own_step, stepless)) if attach else None
        span_id = span.get_span_context()[1]
        umbrella = bucket is None and own_step is not None
        node = Node(spec.name, span, span_id, token, bucket, start_ns, parent_node, umbrella, step)
        versions = attributes.get("rl.trajectory_versions")
        if versions is not None:  # a training phase saying what it consumed: the step's staleness
            node.consumed = _consumed(attributes, versions, own_step if umbrella else None)
        RUNTIME.open_phases[span_id] = node
        if umbrella and hook is not None:  # a step umbrella began: its window opens inside it
            hook.boundary(own_step, span)
        return node
    except Exception as exc:
        internal_error(exc, "phase-start")
        return None


def _consumed(attributes: dict[str, Any], versions: Any, umbrella_step: Any) -> Any:
    """What a training phase said it consumed, as :attr:`Node.consumed` keeps it; a step umbrella that says it
    itself (``umbrella_step``) keeps it as its phases' list, with its step and its policy version (default:
    the step)."""
    said = (attributes.get("rl.policy_version"), versions, attributes.get("rl.trajectory_tokens"))
    consumed = (*said, attributes.get("rl.max_staleness"), attributes.get("rl.trajectory_counts"))
    if umbrella_step is None:
        return consumed
    return [(umbrella_step, umbrella_step if said[0] is None else said[0], *consumed[1:])]


def started(spec: Any) -> Any:
    """The handle ``spec``'s phase records to, telemetry started first if this is the process's first use (the
    driver's claim of a first step under ``lens-rl run``, a lazy start); None while off. What a caller that
    reads the parent context before :func:`open_node` runs first: until then the job root is not known."""
    if RUNTIME.step_claim is not None:  # only in a process lens-rl run started, until its first step
        _first_step(spec)
    return RUNTIME.handle or RUNTIME.resolve()


def _first_step(spec: Any) -> None:
    """A phase with its own step is the process's first: the bootstrap's claim runs (it may start the driver)."""
    claim = RUNTIME.step_claim
    if claim is not None and spec._attributes(None).get("rl.step") is not None:
        claim()


def close_node(node: Node, exc: BaseException | None, end_ns: int | None = None) -> None:
    """Close ``node``: restore the context, record the exception, end the span, credit its time. Never raises.
    ``end_ns``: when it ended, if read before this call."""
    if end_ns is None:
        end_ns = time.time_ns()
    if node.otel_token is not None:
        try:
            runtime_context().detach(node.otel_token)
        except Exception as err:
            internal_error(err, "context-detach")
    if RUNTIME.open_phases.pop(node.span_id, None) is None:
        return  # already ended (shutdown or a replaced handle got there first)
    if node.step_seconds is not None and RUNTIME.step_hook is not None:  # a step umbrella: its window stops inside
        end_ns = _window_stopped(node, end_ns)
    span = node.span
    if exc is not None:
        try:
            if isinstance(exc, Exception):
                from opentelemetry.trace import Status, StatusCode

                record_exception(span, exc)
                span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {safe_str(exc)}"[:1024]))
            else:
                span.add_event("rl.interrupted", {"exception.type": type(exc).__name__})
        except Exception as err:
            internal_error(err, "phase-exception")
    if node.hang is not None:  # the watchdog suspected a hang while it was open
        try:
            span.add_event("rl.hang_suspected", {"rl.hang.age_s": node.hang[0], "rl.hang.timeout_s": node.hang[1]})
        except Exception as err:
            internal_error(err, "phase-hang")
    try:
        span.end(end_ns)
    except Exception as err:
        internal_error(err, "phase-end")
    try:
        _account(node, end_ns)
    except Exception as err:
        internal_error(err, "phase-metrics")


def _window_stopped(node: Node, end_ns: int) -> int:
    """A closing step umbrella's profiler window stopped first, inside it; the umbrella's end then (the capture's
    stopping and writing is its step's time, as the job waited for it)."""
    hook = RUNTIME.step_hook
    try:
        if hook is not None and hook.closing(node.step):
            return max(end_ns, time.time_ns())
    except Exception as err:
        internal_error(err, "profile-closing")
    return end_ns


def _account(node: Node, end_ns: int) -> None:
    bucket = node.bucket
    duration_s = (end_ns - node.start_ns) / 1e9
    exclusive_s = duration_s
    if bucket is not None:
        if node.inner:
            exclusive_s = exclusive_time(node.start_ns, end_ns, node.inner) / 1e9
        if node.outer is not None:
            node.outer.inner.append((node.start_ns, end_ns))
    step_node = node.step_node
    deferred = False
    if bucket is not None and step_node is not None and step_node.step_spans is not None:
        seconds = step_node.step_seconds
        value = bucket._value_  # (.value is an enum descriptor: several times slower on this path)
        seconds[value] = seconds.get(value, 0.0) + exclusive_s  # type: ignore[index,union-attr]
        if node.outer is None or node.outer.step_node is not step_node:  # the umbrella's nearest bucketed phases
            step_node.inner.append((node.start_ns, end_ns))
        # its seconds are counted over the step's wall when the step ends (concurrent phases once)
        step_node.step_spans.append((node.start_ns, end_ns, value, node.inner, node.name, exclusive_s))
        deferred = True
    elif RUNTIME.step_tally is not None and bucket in _COMPUTE and node.step.__class__ is int:
        tally = RUNTIME.step_tally  # (``steps: auto``: a worker's compute per step, for the culprit's choice)
        tally[node.step] = tally.get(node.step, 0.0) + exclusive_s
    if node.consumed is not None and step_node is not None and step_node is not node:
        _consumed_in(node, step_node)
    handle = RUNTIME.handle
    if node.step_seconds is not None:  # a step umbrella ended: what step_goodput() answers from now on
        end_step(node, end_ns, duration_s, handle)
        hook = RUNTIME.step_hook
        if hook is not None:
            hook.step_end(node.step, end_ns)
    if handle is None:
        return
    if node.step is not None:
        RUNTIME.phase_step = node.step
    if handle.phase_metrics is not None:
        handle.phase_metrics.record(
            node.name, bucket._value_ if bucket else None, duration_s, None if deferred else exclusive_s
        )
    if node.step_flush and handle.config.flush_on_step:
        handle.force_flush(min(handle.config.export_timeout_ms, FLUSH_ON_STEP_MAX_MS))
    elif handle.flush_idle and not RUNTIME.open_phases:  # a woven child between two phases: may be killed
        handle.flush_when_idle()


def _consumed_in(node: Node, step_node: Node) -> None:
    """What ``node`` consumed, kept on its open step umbrella (policy version default: the step)."""
    if step_node.step_spans is None:
        return
    policy, versions, tokens, bound, counts = node.consumed
    step = node.step if node.step is not None else step_node.step
    entry = (step, step if policy is None else policy, versions, tokens, bound, counts)
    if step_node.consumed is None:
        step_node.consumed = [entry]
    else:
        step_node.consumed.append(entry)


def enter_with(spec: Any, owner: Any = None) -> Any:
    """``owner.__enter__`` while on (``spec``'s own by default): open ``spec``, push the token on this
    context's stack, yield the span."""
    node = open_node(spec)
    if node is None:
        return NOOP_SPAN
    node.owner = spec if owner is None else owner
    node.prev = ACTIVE.get()
    ACTIVE.set(node)
    RUNTIME.stacked = True
    return PhaseSpan(node.span)


def exit_with(owner: Any, exc: BaseException | None) -> None:
    """``owner.__exit__``: close the token ``owner`` pushed in this context (the top one, unless a
    generator interleaved its own ``with`` blocks with ours). Nothing to do if ``owner`` pushed none."""
    node = ACTIVE.get()
    after: Node | None = None
    while node is not None and node.owner is not owner:
        after, node = node, node.prev
    if node is None:
        return
    if after is None:
        ACTIVE.set(node.prev)
    else:
        after.prev = node.prev
    close_node(node, exc)
