"""What a framework module declares, and the weaving tools it uses (the contract of ``lens_rl.frameworks``).

A framework module (``lens_rl/frameworks/<name>.py``, listed in :data:`lens_rl.frameworks._registry.MODULES`)
defines one module-level ``FRAMEWORK = Framework(...)``:

- ``name``: what ``lens_rl.instrument(name)`` takes (``"verl"``);
- ``distribution`` and ``tested``: the pip distribution whose version is checked, and the range it was tested
  with, a PEP 440 specifier set (``">=0.9,<0.10"``, read by ``packaging``: ``0.9.0.dev0`` is outside it). It
  is checked in the post-import hook, when the framework is imported (at once if it already is), before
  anything is patched: outside it, one warning, the framework stays unwoven. When the distribution is not
  installed (a stand-in), the top module's ``__version__`` is read instead;
- ``distributions`` (optional): a target's top package that installs as a distribution of its own -> that
  distribution (``skyrl_train`` is ``skyrl-train``), checked against ``tested`` too when it is imported (a
  top package not listed, as ``accelerate`` for ``transformers``, is the framework's own distribution's);
- ``targets``: target module name -> ``weave(module, weaver)``. Each weave runs once per weaving, in a wrapt
  post-import hook: when that module is imported, or at once if it already is. It patches *class or module
  attributes* (so names bound elsewhere still see the patch) only through ``weaver`` (:class:`Weaver`), which
  records every patch so that ``uninstrument`` undoes exactly lens_rl's own. A weave that raises (a target
  that moved) is one warning; its framework's patches are undone and it stays unwoven. It never fails the
  import;
- ``requires``: other frameworks woven with it (``trl`` weaves ``transformers``: the step comes from there);
- ``unweave`` (optional): forgets per-process state of the module's own (open steps) after its patches are undone;
- ``stands_down`` (optional): a reason string when the framework's own OpenTelemetry layer is on (lens_rl's
  weaving then stays off, one line says why), else None. Asked at the first on-path use of each woven call.

How a timer becomes a phase (everything below never raises into the framework; faults go to the one error
boundary, :func:`lens_rl._errors.internal_error`):

- ``weaver.around(owner, attr, on_call)`` replaces a function or method with a generated plain function:
  while telemetry is off (or the framework unwoven) it calls the original at the cost of one flag check and
  one call (the hot timers: ``start``/``stop``, ``__enter__``/``__exit__``); while on it calls
  ``on_call(original, args, kwargs)`` (``args[0]`` is ``self`` for a method), which calls ``original`` itself.
- ``weaver.wrap(owner, attr, wrapper)`` wraps with wrapt (``wrap_function_wrapper``), ``wrapper(wrapped,
  instance, args, kwargs)`` called only while on: for the rarer calls (a trainer's ``fit``, ``__init__``).
- (The helpers below live in ``_phases`` and are importable from here.) A method that is a phase as a whole: ``weaver.around(owner, attr, call_in_phase(name))``.
- A start/stop timer: ``phases.start(key, name, **rl_attributes)`` opens the phase ``name`` (bucketed by the
  default table) and ``phases.stop(key)`` closes it, from any thread, with ``phases = OpenPhases(loose=True)``
  (never made current: see ``_phases``) and ``key`` e.g. ``(id(timer), name)``; an enter/exit timer the same
  with ``OpenPhases()`` (made current) and ``key = id(self)`` (entries of one key stack, so re-entry nests).
  :func:`open_phase` / :func:`close_phase` do it with a token instead.
- A step umbrella: ``steps = StepUmbrella("step", loose=True)``; ``steps.begin(number)`` opens phase ``step``
  carrying ``rl.step = number`` and no bucket (what the goodput rollup calls a step; the framework's phases
  opened on its thread until it ends are its children); ``steps.end()`` closes it. ``steps.begin()`` with no
  number counts from ``first`` per process. A ``begin`` while one is open ends that one first; a number at or
  below the last one (a second training) opens a new step series (one warning).
- :func:`record_interval` writes a phase that already happened (a back-dated span, e.g. a timer's ``record``).

Example (a framework module)::

    phases = OpenPhases(loose=True)
    steps = StepUmbrella("step", loose=True)

    def _start(original, args, kwargs):
        phases.start((id(args[0]), args[1]), args[1])
        return original(*args, **kwargs)

    def _weave(module, weaver):
        weaver.around(module.Timer, "start", _start)

    FRAMEWORK = Framework("mylib", "mylib", ">=1.2,<2", {"mylib.timer": _weave})
"""

from __future__ import annotations

import inspect
import threading
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from lens_rl._errors import internal_error
from lens_rl._runtime import RUNTIME
from lens_rl.frameworks._phases import (  # the timer-to-phase half of the contract, importable from here
    OpenPhases,
    StepUmbrella,
    call_in_phase,
    close_phase,
    open_phase,
    record_interval,
)
from lens_rl.record import wrappers

__all__ = [
    "Framework",
    "OpenPhases",
    "Patch",
    "StepUmbrella",
    "Weaver",
    "call_in_phase",
    "close_phase",
    "in_range",
    "open_phase",
    "record_interval",
]

_RT = RUNTIME  # the off paths read ``_RT.on``

Weave = Callable[[ModuleType, "Weaver"], None]


@dataclass(frozen=True)
class Framework:
    """One framework lens_rl weaves into (see the module docstring for each field)."""

    name: str
    distribution: str
    tested: str
    targets: Mapping[str, Weave]
    requires: tuple[str, ...] = ()
    unweave: Callable[[], None] | None = None
    distributions: Mapping[str, str] = field(default_factory=dict)
    stands_down: Callable[[], str | None] | None = None
    #: one ``active`` flag per framework, read by its woven functions (False: pass straight through)
    state: _State = field(default_factory=lambda: _State(), compare=False, repr=False)


class _State:
    """A framework's per-process weaving state (read on every woven call: ``active`` only)."""

    __slots__ = ("active", "patches", "refused", "standing_down", "version_checked")

    def __init__(self) -> None:
        self.active = False
        #: the top packages whose version was asked this weaving (each in the first of its post-import hooks)
        self.version_checked: set[str] = set()
        self.patches: list[Patch] = []
        self.refused: str | None = None  # why it stays unwoven (version, a target that moved)
        self.standing_down: bool | None = None  # None: not asked yet


# ---------------------------------------------------------------------- version ranges


def in_range(version: str, spec: str) -> bool:
    """Whether ``version`` satisfies ``spec``, a PEP 440 specifier set (``">=0.9,<0.10"``), as ``packaging``
    reads both: a pre- or dev-release is what it is (``0.9.0.dev0`` comes before ``0.9``: outside ``>=0.9``),
    and an installed one inside the range is accepted (``1.17.0.dev0`` in ``>=1.16,<2``). A version that is
    not PEP 440 is outside; a bad ``spec`` raises ``ValueError``."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    specifiers = SpecifierSet(spec)
    try:
        return specifiers.contains(Version(version), prereleases=True)
    except InvalidVersion:
        return False


# ---------------------------------------------------------------------- patches


@dataclass
class Patch:
    """One attribute lens_rl replaced: where, what was there, what lens_rl put."""

    owner: Any
    attr: str
    original: Any  # the raw attribute as found in ``owner.__dict__`` (a staticmethod stays one)
    ours: Any
    #: what ``ours`` calls while on (its ``dead`` set for good when ``ours`` is left under another tool's wrapper)
    runner: Any = None


#: id -> patch of every wrapper lens_rl has put in place (what "ours" means; a set of ids stays cheap).
_OURS: dict[int, Patch] = {}
_LOCK = threading.RLock()


def is_ours(obj: Any) -> bool:
    """Whether ``obj`` is a wrapper lens_rl put in place (and still holds)."""
    return id(obj) in _OURS and _OURS[id(obj)].ours is obj


def _raw(owner: Any, attr: str) -> Any:
    """The attribute as stored (a class's own ``__dict__`` first, then its bases: no descriptor bound)."""
    return inspect.getattr_static(owner, attr)


class Weaver:
    """Patches one framework's targets and records them (see the module docstring)."""

    def __init__(self, framework: Framework) -> None:
        self.framework = framework

    def around(self, owner: Any, attr: str, on_call: Callable[[Any, tuple[Any, ...], dict[str, Any]], Any]) -> bool:
        """Replace ``owner.attr`` with a generated plain function; False when it already is lens_rl's
        (here or on a base class: never wrapped twice). A staticmethod / classmethod stays one."""
        with _LOCK:
            raw = _raw(owner, attr)
            if is_ours(raw):
                return False
            kind = type(raw) if isinstance(raw, (staticmethod, classmethod)) else None
            func = raw.__func__ if kind is not None else raw
            if kind is None and isinstance(owner, type) and type(func) is not types.FunctionType:
                func = _bound_through(func)  # another tool's descriptor (a wrapt wrapper): bound as it binds
            runner = _Woven(self.framework, on_call)
            woven = _generate(func, runner, self.framework)
            ours = kind(woven) if kind is not None else woven
            return self._put(owner, attr, raw if attr in _own_dict(owner) else None, ours, runner)

    def wrap(self, owner: Any, attr: str, wrapper: Callable[[Any, Any, tuple[Any, ...], dict[str, Any]], Any]) -> bool:
        """Wrap ``owner.attr`` with wrapt; ``wrapper(wrapped, instance, args, kwargs)`` runs only while on.
        False when it already is lens_rl's (here or on a base class)."""
        import wrapt

        with _LOCK:
            raw = _raw(owner, attr)
            if is_ours(raw):
                self._adopt(owner, attr, raw)
                return False
            original = raw if attr in _own_dict(owner) else None
            gate = _Gate(wrapper, self.framework.state)
            ours = wrapt.wrap_function_wrapper(owner, attr, gate)  # positional: 2.x renamed an argument
            return self._record(owner, attr, original, ours, gate)

    def _adopt(self, owner: Any, attr: str, ours: Any) -> None:
        """A module that bound lens_rl's wrapper by name (``from x import f`` after ``x.f`` was woven): recorded
        as this framework's too, so ``uninstrument`` puts the original back there as well."""
        source = _OURS[id(ours)]
        if (
            isinstance(owner, ModuleType)
            and source.original is not None
            and source.owner is not owner
            and _own_dict(owner).get(attr) is ours
        ):
            self.framework.state.patches.append(Patch(owner, attr, source.original, ours, source.runner))

    def _put(self, owner: Any, attr: str, original: Any, ours: Any, runner: Any) -> bool:
        setattr(owner, attr, ours)
        return self._record(owner, attr, original, ours, runner)

    def _record(self, owner: Any, attr: str, original: Any, ours: Any, runner: Any) -> bool:
        patch = Patch(owner, attr, original, ours, runner)
        _OURS[id(ours)] = patch
        self.framework.state.patches.append(patch)
        return True


def _bound_through(descriptor: Any) -> Any:
    """A function calling ``descriptor`` bound to its first argument, as attribute access would bind it."""

    def through(self: Any, *args: Any, **kwargs: Any) -> Any:
        return descriptor.__get__(self, type(self))(*args, **kwargs)

    through.__wrapped__ = descriptor  # type: ignore[attr-defined]
    return through


def _own_dict(owner: Any) -> Mapping[str, Any]:
    return owner.__dict__ if isinstance(owner, (type, ModuleType)) else vars(owner)


def _generate(func: Any, runner: _Woven, framework: Framework) -> Any:
    """The plain function standing in for ``func``, with its exact signature (``record.wrappers``): one flag
    check and a call while off (no ``*args`` packing: that alone costs ~250 ns a call here)."""
    woven = wrappers.wrap(func, runner, kind="sync")
    woven.__lens_rl_framework__ = framework.name
    return woven


class _Woven(wrappers.Runner):  # type: ignore[misc]
    """What a generated stand-in calls while telemetry is on: the framework's ``on_call``, if it is woven (and
    this stand-in is not ``dead``: one ``uninstrument`` left under another tool's wrapper, a pass-through for
    good, so a later weaving on top of that wrapper is the only one)."""

    __slots__ = ("dead", "framework", "on_call")

    def __init__(self, framework: Framework, on_call: Callable[..., Any]) -> None:
        self.framework = framework
        self.on_call = on_call
        self.dead = False

    def _run(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        if self.framework.state.active and not self.dead:
            return _on(self.framework, fn, self.on_call, args, kwargs)
        return fn(*args, **kwargs)


class _Gate:
    """lens_rl's wrapt wrapper: ``wrapper`` while on and woven (and not ``dead``, as :class:`_Woven`)."""

    __slots__ = ("dead", "state", "wrapper")

    def __init__(self, wrapper: Callable[..., Any], state: _State) -> None:
        self.wrapper = wrapper
        self.state = state
        self.dead = False

    def __call__(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if _RT.on and self.state.active and not self.dead:
            return self.wrapper(wrapped, instance, args, kwargs)
        return wrapped(*args, **kwargs)


def _on(framework: Framework, func: Any, on_call: Callable[..., Any], args: Any, kwargs: Any) -> Any:
    """The on path of a woven call: the framework's ``on_call``, unless it stands down."""
    state = framework.state
    if state.standing_down is None and framework.stands_down is not None:
        reason = None
        try:
            reason = framework.stands_down()
        except Exception as exc:
            internal_error(exc, f"framework-{framework.name}")
        state.standing_down = bool(reason)
        if reason:
            from lens_rl._errors import warn_once

            warn_once(f"stand-down-{framework.name}", "lens_rl: %s weaving stands down: %s", framework.name, reason)
    if state.standing_down:
        return func(*args, **kwargs)
    return on_call(func, args, kwargs)


def unpatch(patch: Patch) -> bool:
    """Undo one of lens_rl's patches, leaving any other tool's wrapper in place; True when lens_rl's is gone
    (on top: the original put back; under a wrapt proxy of another tool: spliced out of its chain). Under a
    plain wrapper of another tool (a function that calls what it closed over) lens_rl's stays, a pass-through
    for good: False."""
    owner, attr, ours = patch.owner, patch.attr, patch.ours
    with _LOCK:
        current = _own_dict(owner).get(attr)
        if current is ours:
            if patch.original is None:
                delattr(owner, attr)
            else:
                setattr(owner, attr, patch.original)
            _OURS.pop(id(ours), None)
            return True
        node = current
        inner = patch.original
        while node is not None:
            below = getattr(node, "__wrapped__", None)
            if below is ours or below is _unwrapped(ours):
                try:
                    if not _is_proxy(node):  # (a plain function's ``__wrapped__`` is a note, not what it calls)
                        raise TypeError(node)
                    node.__wrapped__ = inner if inner is not None else _raw(owner, attr)
                except (AttributeError, TypeError):  # a plain wrapper of another tool holds ours: it stays
                    if patch.runner is not None:
                        patch.runner.dead = True
                    return False
                _OURS.pop(id(ours), None)
                return True
            node = below
        return False


def _is_proxy(node: Any) -> bool:
    """Whether ``node`` calls its ``__wrapped__`` as it is now (a wrapt proxy), so setting it splices."""
    import wrapt

    return isinstance(node, getattr(wrapt, "BaseObjectProxy", wrapt.ObjectProxy))  # (2.x: the C base of all)


def _unwrapped(obj: Any) -> Any:
    return obj.__func__ if isinstance(obj, (staticmethod, classmethod)) else obj
