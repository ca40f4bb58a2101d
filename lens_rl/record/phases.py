"""`traced_phase`: spans for training phases, a context manager and a decorator in one object.

Cost model (see ``benchmarks/``): with telemetry off, a decorated function costs one
flag read and one extra call; ``with traced_phase("x")`` costs a dict lookup for the
phase object plus two flag reads, and never touches OpenTelemetry. Phase objects
hold no per-entry state (that lives in a contextvar stack), so one object may be
entered from many threads and tasks at once and is cached per name.

Example::

    @traced_phase("policy_training", step=3)        # rl.step = 3, bucket productive
    def train(batch): ...

    with traced_phase("generation") as span:
        span.set_attribute("rl.num_prompts", 64)
"""

from __future__ import annotations

import inspect
import operator
import reprlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from lens_rl._attributes import MAX_VALUE_CHARS, clean_attributes, clean_text, without
from lens_rl._runtime import RUNTIME
from lens_rl.buckets import Bucket, coerce_bucket, default_bucket
from lens_rl.record import _impl, consumed, wrappers
from lens_rl.record.engine import Node, close_node, enter_with, exit_with, open_node

__all__ = ["Phase", "traced_phase"]

F = TypeVar("F", bound=Callable[..., Any])
_RT = RUNTIME  # a module global: the hot paths read ``_RT.on``


def _check(name: object, parent: object = None, attributes: object = None) -> None:
    """The validation ``traced_phase`` does at the call, the same whether telemetry is on or off."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"traced_phase: name must be a non-empty string, got {name!r}")
    if parent is not None and not isinstance(parent, Mapping):
        raise ValueError(f"traced_phase: parent must be a carrier dict from inject_context(), got {parent!r}")
    if attributes is not None and not isinstance(attributes, Mapping):
        raise ValueError(f"traced_phase: attributes must be a mapping, got {attributes!r}")


#: Past the last int64: a step is an int in [-STEP_END, STEP_END) (what every reader holds).
STEP_END = 2**63


def check_step(step: Any) -> None:
    """``ValueError`` unless ``step`` is None or an int within int64 (a bool is no step; a numpy integer is one),
    the same whether telemetry is on or off: a step of another type would be recorded as it is and read back as
    a step of its own."""
    if step is None or (step.__class__ is int and -STEP_END <= step < STEP_END):
        return
    message = f"traced_phase: step must be an int in [-2**63, 2**63), got {reprlib.repr(step)}"
    if isinstance(step, bool) or not hasattr(type(step), "__index__"):
        raise ValueError(message)
    try:
        number = operator.index(step)
    except Exception as exc:
        raise ValueError(message) from exc
    if not -STEP_END <= number < STEP_END:
        raise ValueError(message)


class Phase(wrappers.Runner, _impl.ScopeBase):  # type: ignore[misc, valid-type]
    """A training phase: a context manager and a decorator (sync, async, generators, methods).

    Made by :func:`traced_phase`; immutable and shareable.
    """

    __slots__ = ("name", "bucket", "parent", "attributes", "rl_attributes", "_static", "_default", "_parent_ctx")
    #: True for a phase in no step (a worker's start-up): the step its caller carried is neither recorded on it
    #: nor carried to what runs inside it
    stepless = False

    def __init__(
        self,
        name: str,
        bucket: Bucket | None = None,
        parent: Mapping[str, str] | None = None,
        attributes: Mapping[str, Any] | None = None,
        rl_attributes: Mapping[str, Any] | None = None,
    ) -> None:
        _check(name, parent, attributes)
        self.name = clean_text(name)  # what every span of it is named (repaired, bounded, credentials masked)
        self.bucket = bucket
        self.parent = dict(parent) if parent else None
        self.attributes = dict(attributes) if attributes else None
        self.rl_attributes = dict(rl_attributes) if rl_attributes else None
        self._default = default_bucket(name)
        self._static: dict[str, Any] | None = None
        self._parent_ctx: Any = None

    def __repr__(self) -> str:
        bucket = f", bucket={self.bucket.value!r}" if self.bucket else ""
        return f"traced_phase({self.name!r}{bucket})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _rebuild,
            (self.name, self.bucket.value if self.bucket else None, self.parent, self.attributes, self.rl_attributes),
        )

    # ------------------------------------------------------------ context manager

    # ``__enter__`` / ``__exit__`` come from ScopeBase (lens_rl.record._impl): free while off. While on they call
    # these, the engine's functions themselves (the phase is its own owner): no call in between.
    _enter_on = enter_with
    _exit_on = exit_with

    async def __aenter__(self) -> Any:
        return self.__enter__()

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.__exit__(exc_type, exc, tb)

    # ------------------------------------------------------------ decorator

    def __call__(self, fn: F) -> F:
        return wrappers.decorate(fn, self)  # type: ignore[no-any-return]

    # The Runner scope: a span opened and made current; its token closes it.
    def _open(self) -> Node | None:
        return open_node(self)

    def _close(self, node: Node | None, exc: BaseException | None) -> None:
        if node is not None:
            close_node(node, exc)

    # ------------------------------------------------------------ enabled path

    def _attributes(self, bucket: Bucket | None) -> dict[str, Any]:
        static = self._static
        if static is None:
            # lens_rl's own first (they win a clash, and stay within the span's attribute limit)
            rl, histogram = self.rl_attributes, None
            if rl and "trajectory_versions" in rl:  # what it consumed: its histogram, never cut to the list cap
                histogram = _histogram(self.name, rl)
                rl = {k: v for k, v in rl.items() if k not in consumed.HISTOGRAM}
            static = clean_attributes(rl, prefix="rl.")
            if histogram:
                static.update(histogram)
            for key, value in clean_attributes(self.attributes).items():
                static.setdefault(key, value)
            if static.get("rl.step", 0).__class__ is not int:  # (attributes=, a woven phase's): never written
                del static["rl.step"]  # as a step no reader takes (a cleaned int past int64 is text)
            self._static = static = without(static)  # rl.bucket: set by lens_rl alone
        if bucket is None:
            return dict(static)
        return {"rl.bucket": bucket._value_, **static}  # (_value_: .value is a slow enum descriptor)

    def _parent(self) -> Any:
        if self._parent_ctx is None:
            from lens_rl.propagation import extract

            self._parent_ctx = extract(self.parent) or False
        return self._parent_ctx or None


def _histogram(name: str, rl: dict[str, Any]) -> dict[str, Any]:
    """The ``rl.`` attributes of what a phase consumed: the histogram :func:`_make_phase` made (or, for a phase
    made another way with the plain lists, made now; nothing where they are not what traced_phase takes)."""
    if "trajectory_counts" not in rl:
        try:
            rl = consumed.consumed(rl)
        except Exception as exc:  # (any: an item's own __hash__ or __eq__ may raise; never into the training code)
            consumed.warn_unread(name, exc)
            return {}
    return {f"rl.{k}": rl[k] for k in consumed.HISTOGRAM if rl.get(k) is not None}


def _rebuild(name: str, bucket: str | None, parent: Any, attributes: Any, rl_attributes: Any) -> Phase:
    return Phase(name, coerce_bucket(bucket), parent, attributes, rl_attributes)


# ---------------------------------------------------------------------- public API

_CACHE: dict[Any, Phase] = RUNTIME.phase_cache
# a member equals (and hashes as) its value, so one entry serves both; the strings' lookups hit by identity
_VALID_BUCKETS: frozenset[Any] = frozenset([None, *(member.value for member in Bucket)])
_PLAIN = frozenset([type(None), dict])  # the classes of a parent or attributes argument that need no check
_VALID_NAMES: set[str] = set()  # names checked valid by a phase made while off (bounded like the cache)
_CACHE_MAX = 4096
_CONSUMED = consumed.KEYWORDS


if TYPE_CHECKING:

    def traced_phase(
        name: str,
        *,
        bucket: Bucket | str | None = None,
        parent: Mapping[str, str] | None = None,
        attributes: Mapping[str, Any] | None = None,
        **rl_attributes: Any,
    ) -> Phase: ...

else:

    def _traced_phase_py(name, /, **kwargs):
        """A training phase: ``with traced_phase(name): ...`` or ``@traced_phase(name)``.

        One object, a context manager and a decorator for sync and async functions and
        methods, generators and async generators (a traced generator records one span per
        resumption, under whatever is current for its consumer then). Enabled, it opens a
        span ``name`` carrying ``rl.bucket``: the explicit ``bucket``, else the innermost
        :func:`with_bucket`, else the default for a known RL phase name, else none (an
        umbrella span such as a whole step). ``parent`` takes a carrier from
        :func:`inject_context`. Keyword attributes are recorded as ``rl.<key>``;
        ``attributes={...}`` takes exact keys. It yields a span-like object
        (``set_attribute``, ``add_event``, ``record_exception``); user exceptions pass
        through unchanged and are recorded with status ERROR. An invalid bucket or step, or a
        staleness keyword (``trajectory_versions``, ``trajectory_tokens``, ``policy_version``,
        ``max_staleness``: :mod:`lens_rl.record.consumed`) of the wrong type, raises ``ValueError``
        here, enabled or not (their items are read while enabled). Disabled, it yields a no-op span and touches
        no OpenTelemetry. The first phase of a process whose environment says enabled
        starts worker telemetry. (This is the one docstring: the C entry point shows it.)

        Example::

            with traced_phase("generation", step=step) as span:
                outputs = llm.generate(prompts)
                span.set_attribute("rl.num_samples", len(outputs))
        """
        if not kwargs:
            try:
                return _CACHE[name]
            except (KeyError, TypeError):
                return _make_phase(name)
        if _RT.on:
            return _phase_on(name, kwargs)
        # the checks _check and coerce_bucket make, with the common shapes (a name or bucket seen valid before,
        # dicts) answered by a lookup each
        try:
            if name not in _VALID_NAMES or ("bucket" in kwargs and kwargs["bucket"] not in _VALID_BUCKETS):
                _check_off(name, kwargs.get("bucket"))
        except TypeError:  # unhashable: not valid
            _check_off(name, kwargs.get("bucket"))
        if "step" in kwargs:
            step = kwargs["step"]
            if step is not None and (step.__class__ is not int or not -STEP_END <= step < STEP_END):
                check_step(step)
        if not _CONSUMED.isdisjoint(kwargs):
            consumed.check(kwargs)
        if "attributes" in kwargs:
            if kwargs["attributes"].__class__ not in _PLAIN or (
                "parent" in kwargs and kwargs["parent"].__class__ not in _PLAIN
            ):
                _check(name, kwargs.get("parent"), kwargs["attributes"])
        elif "parent" in kwargs and kwargs["parent"].__class__ not in _PLAIN:
            _check(name, kwargs["parent"])
        lazy = _LazyPhase()  # a type call without __init__: cheaper than object.__new__(cls)
        lazy.name = name
        lazy.kwargs = kwargs
        return lazy


def _check_off(name: Any, bucket: Any) -> None:
    """The name and bucket checks of a phase made while off: raises, naming what is allowed, or
    remembers the name as valid (a valid bucket spelling is coerced when the phase is made)."""
    coerce_bucket(bucket)
    _check(name)
    if name.__class__ is str:
        if len(_VALID_NAMES) >= _CACHE_MAX:
            _VALID_NAMES.clear()
        _VALID_NAMES.add(name)


#: Starts a keyword phase's cache key and its attributes' part (the C entry point keys with this very object).
KEY_MARKER = object()


def cache_key(name: str, kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """A keyword phase's key in the phase cache: the marker, the name, then each keyword's name, value and
    the value's type (1, 1.0 and True are equal and hash alike, but record apart); an ``attributes`` dict's
    items the same way after the marker again. The C entry point builds the very same key, so one call
    shape is one entry whichever implementation met it first. A text or bytes value past the attribute cap, a
    tuple or list of more than :data:`MAX_KEY_ITEMS` items, and a call with any staleness keyword (a batch's
    lists, a step's versions: a new entry each step that would keep the batch alive) are never keyed
    (TypeError, as an unhashable value: hashing them costs in proportion to their size)."""
    if not _CONSUMED.isdisjoint(kwargs):
        raise TypeError("what a phase consumed is never keyed")
    key: list[Any] = [KEY_MARKER, name]
    attributes = kwargs.get("attributes")
    exact = attributes.__class__ is dict
    for k, v in kwargs.items():
        if not (exact and k == "attributes"):
            key += (k, v, v.__class__)
    if exact:
        key.append(KEY_MARKER)
        for k, v in attributes.items():  # type: ignore[union-attr]
            key += (k, v, v.__class__)
    for item in key:
        if (item.__class__ in _LONG_HASH and len(item) > MAX_VALUE_CHARS) or (
            isinstance(item, (tuple, list)) and len(item) > MAX_KEY_ITEMS
        ):
            # its hash would cost in proportion to its size: never keyed (made each time, its value capped first)
            raise TypeError("too long to key")
    return tuple(key)


_LONG_HASH = (str, bytes)
#: The most items of a tuple (or list) value a phase cache key holds (the C entry point's MAX_KEY_ITEMS).
MAX_KEY_ITEMS = 64


def _phase_on(name: str, kwargs: dict[str, Any]) -> Phase:
    """The phase for these arguments while on: made once per distinct arguments (a cache bounded like the
    plain names'), so a ``with traced_phase("generation", bucket="productive", step=s)`` inside a loop
    neither validates nor cleans its attributes again on each entry."""
    try:
        key = cache_key(name, kwargs)
        phase = _CACHE.get(key)
    except (TypeError, AttributeError):  # an unhashable value: made each time
        return _make_phase(name, **kwargs)
    if phase is None:  # made (and the bucket checked) once per distinct arguments
        phase = _make_phase(name, **kwargs)
        if len(_CACHE) >= _CACHE_MAX:
            _CACHE.clear()
        _CACHE[key] = phase
    return phase


class _LazyPhase(_impl.LazyBase):  # type: ignore[misc, valid-type]
    """What ``traced_phase(name, **kwargs)`` returns while off: the arguments, unprocessed.

    The bucket is validated at once; everything else waits until the object is used
    as a decorator or entered while telemetry is on, so the off path stays cheap.
    Its storage (``name``, ``kwargs``, ``phase``) comes from :mod:`lens_rl.record._impl`.
    """

    __slots__ = ()
    name: str
    kwargs: dict[str, Any]
    phase: Phase | None

    def _materialize(self) -> Phase:
        return _make_phase(self.name, **self.kwargs)

    def _enter_on(self) -> Any:
        # A Phase holds no per-entry state: threads racing here may each make one,
        # harmlessly. The token on this context's stack is owned by this object, so
        # the exit closes what this entry opened, whichever Phase was kept.
        phase = getattr(self, "phase", None)
        if phase is None:
            self.phase = phase = self._materialize()  # type: ignore[misc]
        return enter_with(phase, self)

    def _exit_on(self, exc: BaseException | None) -> None:
        exit_with(self, exc)

    async def __aenter__(self) -> Any:
        return self.__enter__()

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.__exit__(exc_type, exc, tb)

    def __call__(self, fn: F) -> F:
        return self._materialize()(fn)

    def __reduce__(self) -> tuple[Any, ...]:
        return self._materialize().__reduce__()

    def __repr__(self) -> str:
        return repr(self._materialize())


def _make_phase(
    name: str,
    *,
    bucket: Bucket | str | None = None,
    parent: Mapping[str, str] | None = None,
    attributes: Mapping[str, Any] | None = None,
    **rl_attributes: Any,
) -> Phase:
    if "step" in rl_attributes:
        check_step(rl_attributes["step"])
    if not consumed.KEYWORDS.isdisjoint(rl_attributes):  # checked item by item, as the histogram it records
        said = consumed.recorded(name, rl_attributes)
        for key in consumed.KEYWORDS:
            rl_attributes.pop(key, None)
        rl_attributes.update(said)
    phase = Phase(name, coerce_bucket(bucket), parent, attributes, rl_attributes)
    if not (bucket or parent or attributes or rl_attributes) and len(_CACHE) < _CACHE_MAX:
        _CACHE[name] = phase
    return phase


if not TYPE_CHECKING:
    _traced_phase_py.__signature__ = inspect.signature(_make_phase)
    traced_phase = _impl.traced_phase_entry(_traced_phase_py, _CACHE, _LazyPhase, Bucket, RUNTIME, KEY_MARKER)
