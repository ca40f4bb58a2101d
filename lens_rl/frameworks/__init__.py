"""Frameworks, zero code: lens_rl's phases woven into the timers NeMo-RL, veRL, TRL, SkyRL and OpenRLHF already have.

``lens_rl.instrument(*names)`` weaves the named frameworks (``trl``, ``transformers``, ``verl``, ``nemo_rl``,
``skyrl``, ``openrlhf``; none: every supported one installed) and returns what it wove; it works before or
after the framework is imported (wrapt post-import hooks), patches class and module attributes (names bound
elsewhere still see them), is idempotent and never wraps twice. ``lens_rl.uninstrument(*names)`` removes
lens_rl's own wrappers only (of the frameworks a name implied too). A version outside the tested range, or a target that moved, is one warning and
that framework stays unwoven; a hook never fails the framework's import or run. While telemetry is off a
woven timer costs one flag check a call (``benchmarks/frameworks_overhead.py``).

How a framework plugs in (the contract; details in :mod:`lens_rl.frameworks._base`):

1. A module ``lens_rl/frameworks/<name>.py``, listed in ``_registry.MODULES``, defines
   ``FRAMEWORK = Framework(name, distribution, tested, targets, requires=(), unweave=None, stands_down=None)``:
   the name ``instrument`` takes; the pip distribution and the version range it was tested with
   (a PEP 440 specifier set, ``">=0.9,<0.10"``, checked in the post-import hook before anything is patched); ``targets``, target module name ->
   ``weave(module, weaver)``, run once per weaving when that module is imported (or at once); the frameworks
   woven with it; a function forgetting its own per-process state after its patches are undone; and a
   check that returns a reason when the framework's own OpenTelemetry layer is on (lens_rl stands down).
2. ``weave`` patches only through ``weaver``: ``weaver.around(owner, attr, on_call)`` (a generated plain
   function: off, one flag check and the original; on, ``on_call(original, args, kwargs)``) for hot timers,
   ``weaver.wrap(owner, attr, wrapper)`` (wrapt, ``wrapper(wrapped, instance, args, kwargs)`` while on) for
   the rest. Both skip a target that is lens_rl's already (on a base class too). Unweaving is automatic.
3. A timer's start/stop or enter/exit becomes a phase with ``OpenPhases().start(key, name, **rl_attrs)`` /
   ``.stop(key)`` (or ``open_phase`` / ``close_phase`` with a token); the phase is named as the framework
   logs it and bucketed by the default table (``lens_rl/buckets.py``, which lists every woven name).
4. The step umbrella is ``StepUmbrella("step")``: ``.begin(number)`` opens phase ``step`` with ``rl.step =
   number`` and no bucket, ``.end()`` closes it; the framework's own counter gives the number (``begin()``
   with none counts per process). ``record_interval(name, start_ns, end_ns)`` writes a back-dated phase.
5. Everything in an ``on_call`` that is lens_rl's own goes through the error boundary
   (``lens_rl._errors.internal_error``); the helpers above never raise. User exceptions pass through.

``lens-rl run -- COMMAND`` (:mod:`lens_rl.frameworks.run`) runs an unmodified job with every Python process it
starts woven, through the ``sitecustomize`` in ``lens_rl/frameworks/bootstrap/``.

Example::

    import lens_rl

    lens_rl.instrument("trl")            # before or after `import trl`
    trainer.train()                      # steps and TRL's profiled blocks are phases
"""

from __future__ import annotations

import os

from lens_rl._runtime import Handle
from lens_rl.frameworks._registry import SUPPORTED, installed, names_from
from lens_rl.frameworks._registry import instrument as _instrument
from lens_rl.frameworks._registry import uninstrument as _uninstrument

__all__ = [
    "INSTRUMENT_ENV",
    "SUPPORTED",
    "apply_configured",
    "installed",
    "instrument",
    "uninstrument",
    "weave_configured",
]

#: The environment variable of the config field ``instrument``.
INSTRUMENT_ENV = "LENS_RL_OTEL_INSTRUMENT"


def instrument(*names: str) -> list[str]:
    """Weave lens_rl's phases into the named frameworks; with no names, every supported one that is installed.

    Works before or after the framework is imported; idempotent. Returns the names woven (a framework's
    ``requires`` included: ``trl`` weaves ``transformers``). An unknown name raises ``ValueError`` with a
    did-you-mean; a version outside the tested range is one warning and that framework unwoven, when it is
    imported (at once if it already is: then it is not returned).

    Example::

        lens_rl.instrument("trl")        # ['transformers', 'trl']
    """
    return _instrument(*names)


def uninstrument(*names: str) -> list[str]:
    """Remove lens_rl's own wrappers from the named frameworks (none: all) and from the frameworks only they
    implied (``trl``'s ``transformers``); another tool's stay. Returns the names."""
    return _uninstrument(*names)


def apply_configured(value: object = None) -> list[str]:
    """Weave what the config field ``instrument`` names (a list, or a comma-separated string; ``all``); by
    default what ``LENS_RL_OTEL_INSTRUMENT`` says. Never raises: a bad name is one warning (a worker)."""
    from lens_rl._errors import internal_error, warn_once

    if value is None:
        value = os.environ.get(INSTRUMENT_ENV, "")
    items = value.split(",") if isinstance(value, str) else list(value or ())  # type: ignore[call-overload]
    try:
        names = names_from(items)
    except ValueError as exc:
        warn_once("instrument-names", "lens_rl: %s", exc)
        return []
    if not names:
        return []
    if "all" in [str(item).strip().lower() for item in items] or set(names) >= set(SUPPORTED):
        names = ["all"]  # (the config spells ``all`` as every name): every supported one installed
    try:
        return _instrument(*names)
    except Exception as exc:
        internal_error(exc, "frameworks")
        return []


def weave_configured(handle: Handle) -> list[str]:
    """The runtime's activate hook (``RUNTIME.activate_hooks``): weave what the config of the telemetry just
    started names (driver, worker or lazy alike). Never raises."""
    names = handle.config.instrument
    return apply_configured(names) if names else []
