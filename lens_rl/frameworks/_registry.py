"""The registry of frameworks and their post-import hooks: what ``lens_rl.instrument`` / ``uninstrument`` do.

One :class:`~lens_rl.frameworks._base.Framework` per name, loaded lazily from its module (:data:`MODULES`).
Weaving a framework (the shape of OpenTelemetry contrib's ``BaseInstrumentor``): its ``active`` flag is set,
and a wrapt post-import hook is registered once per target module (wrapt calls it at once when the module is
already imported). The hook checks the framework's version against its tested range (a PEP 440 specifier set)
before its first patch: only a framework that is imported is ever asked its version. Every hook body runs
behind the one error boundary: a fault is one warning, the framework's patches are undone and it stays
unwoven; the framework's import goes on. Unweaving undoes lens_rl's own patches only, of the named frameworks
and of the ones they implied (``trl`` -> ``transformers``) unless those were named on their own too.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import time
from collections.abc import Iterable
from types import ModuleType

from lens_rl._errors import internal_error, warn_once
from lens_rl.frameworks._base import Framework, Weaver, in_range, unpatch

__all__ = [
    "IMPORT_WAIT_S",
    "MODULES",
    "SUPPORTED",
    "framework",
    "instrument",
    "installed",
    "names_from",
    "register",
    "uninstrument",
]

#: name -> the module that defines its ``FRAMEWORK`` (one per framework; the order is the weaving order).
MODULES: dict[str, str] = {
    "transformers": "lens_rl.frameworks.transformers",
    "trl": "lens_rl.frameworks.trl",
    "verl": "lens_rl.frameworks.verl",
    "nemo_rl": "lens_rl.frameworks.nemo_rl",
    "skyrl": "lens_rl.frameworks.skyrl",
    "openrlhf": "lens_rl.frameworks.openrlhf",
}
SUPPORTED: tuple[str, ...] = tuple(MODULES)

_LOADED: dict[str, Framework] = {}
#: (framework name, target module) pairs whose post-import hook is registered (wrapt keeps hooks for good).
_HOOKED: set[tuple[str, str]] = set()
#: (framework name, target module) pairs woven since the framework was last activated.
_WOVEN: set[tuple[str, str]] = set()
#: Frameworks ``instrument`` was asked for by name (or by ``all``), and who implied each other one: a
#: framework woven only because another ``requires`` it goes when the last of those goes.
_NAMED: set[str] = set()
_IMPLIED: dict[str, set[str]] = {}
_LOCK = threading.RLock()
#: (framework, target, module) being imported by another thread when ``instrument`` ran: woven when it ends.
_PENDING: list[tuple[Framework, str, ModuleType]] = []
#: How long ``instrument`` waits for another thread's import of a framework to end (seconds); past it, a
#: thread of lens_rl weaves the framework once the import ends, and ``instrument`` returns.
IMPORT_WAIT_S = 5.0


def register(fw: Framework) -> Framework:
    """Make ``fw`` known by its name (a framework module's own, or a test's stand-in)."""
    _LOADED[fw.name] = fw
    return fw


def framework(name: str, *, quiet: bool = False) -> Framework | None:
    """The framework called ``name``, its module imported on first use; None (one warning unless ``quiet``)
    if it cannot be."""
    fw = _LOADED.get(name)
    if fw is not None:
        return fw
    path = MODULES.get(name)
    if path is None:
        return None
    try:
        fw = importlib.import_module(path).FRAMEWORK
    except Exception as exc:  # a module of ours that is missing or broken: that framework stays unwoven
        if not quiet:
            warn_once(f"framework-module-{name}", "lens_rl: cannot weave %s: %r", name, exc)
        return None
    return register(fw)


def names_from(names: Iterable[str]) -> list[str]:
    """``names`` checked (``all`` = every supported one), in weaving order: the config field's own parser, so
    an unknown name is the same ``ValueError`` with a did-you-mean (a registered stand-in counts as known)."""
    from lens_rl.config.values import name_list  # (setup, reached lazily)

    known = (*MODULES, *[name for name in _LOADED if name not in MODULES])
    return list(name_list(known)(list(names), "instrument"))


def installed(name: str) -> bool:
    """Whether any target module of framework ``name`` can be imported here (found, not imported)."""
    fw = framework(name, quiet=True)
    if fw is None:
        return False
    for target in fw.targets:
        try:
            if target in sys.modules or importlib.util.find_spec(target.split(".")[0]) is not None:
                return True
        except (ImportError, ValueError):
            continue
    return False


def instrument(*names: str) -> list[str]:
    """Weave the named frameworks (none: every supported one installed); the names now woven."""
    with _LOCK:
        wanted = names_from(names)
        if not names or "all" in [str(n).strip().lower() for n in names]:  # every supported one installed
            wanted = [n for n in wanted or SUPPORTED if installed(n)]
        _NAMED.update(wanted)
        for name in list(wanted):
            fw = framework(name)
            if fw is not None:
                for required in fw.requires:
                    _IMPLIED.setdefault(required, set()).add(name)
                wanted[wanted.index(name) : wanted.index(name)] = [r for r in fw.requires if r not in wanted]
        for name in wanted:
            fw = framework(name)
            if fw is not None and not fw.state.active:
                _activate(fw)
        pending = _PENDING[:]
        _PENDING.clear()
    _woven_once_imported(pending)
    return [n for n in wanted if n in _LOADED and _LOADED[n].state.active and installed(n)]


def uninstrument(*names: str) -> list[str]:
    """Undo lens_rl's weaving of the named frameworks (none: all) and of the frameworks only they implied
    (``trl``'s ``transformers``, unless it was named on its own too); the names unwoven."""
    with _LOCK:
        if names:
            chosen = names_from(names)
            _NAMED.difference_update(chosen)
            for name in list(chosen):
                fw = _LOADED.get(name)
                for required in fw.requires if fw is not None else ():
                    implied = _IMPLIED.get(required, set())
                    implied.discard(name)
                    if not implied and required not in _NAMED and required not in chosen:
                        chosen.append(required)
        else:
            chosen = list(_LOADED)
            _NAMED.clear()
            _IMPLIED.clear()
        done = []
        for name in reversed(chosen):
            fw = _LOADED.get(name)
            if fw is not None and (fw.state.active or fw.state.patches):
                _deactivate(fw)
                done.append(name)
        return done[::-1]


def _activate(fw: Framework) -> None:
    state = fw.state
    state.refused = None
    state.standing_down = None
    state.version_checked = set()
    state.active = True
    for target in fw.targets:
        module = sys.modules.get(target)
        if module is not None and _importing(module):  # another thread imports it now: woven once it is done
            _weave_once_imported(fw, target, module)
            continue
        if (fw.name, target) not in _HOOKED:
            _HOOKED.add((fw.name, target))
            _register_hook(fw, target)
        if module is not None:
            _weave(fw, target, module)


def _importing(module: ModuleType) -> bool:
    """Whether ``module`` is still being imported (in ``sys.modules``, its body still running)."""
    return getattr(getattr(module, "__spec__", None), "_initializing", False) is True


def _weave_once_imported(fw: Framework, target: str, module: ModuleType) -> None:
    """Weave ``target`` once the import under way ends (the hook wrapt would run at once would see a half-made
    module): ``instrument`` waits for it, outside the registry's lock, watching the module until its import
    is done, at most :data:`IMPORT_WAIT_S` (an import that waits for ``instrument``'s caller never waits for
    ever); if this thread is the one importing it (its code runs here), or the import outlasts the wait, a
    thread waits instead. A failed import leaves the hook for the next one."""
    _PENDING.append((fw, target, module))


def _woven_once_imported(pending: list[tuple[Framework, str, ModuleType]]) -> None:
    for fw, target, module in pending:
        if not _runs_here(module):
            deadline = time.monotonic() + IMPORT_WAIT_S
            while _still_importing(target, module) and time.monotonic() < deadline:
                time.sleep(0.005)
        if _still_importing(target, module):
            threading.Thread(target=_poll, args=(fw, target, module), name="lens_rl-weave", daemon=True).start()
        else:
            _after_import(fw, target, module)


def _still_importing(target: str, module: ModuleType) -> bool:
    return sys.modules.get(target) is module and _importing(module)


def _runs_here(module: ModuleType) -> bool:
    """Whether this thread is running ``module``'s code (its body: this thread imports it, and waiting here
    for the import to end would wait for ever). A frame of its body has its namespace, or its name where the
    body put another module object in its place (transformers' ``_LazyModule``)."""
    import inspect

    namespace, name = vars(module), module.__name__
    frame = inspect.currentframe()
    while frame is not None:
        if frame.f_globals is namespace or frame.f_globals.get("__name__") == name:
            return True
        frame = frame.f_back
    return False


def _poll(fw: Framework, target: str, module: ModuleType) -> None:
    while _still_importing(target, module):
        time.sleep(0.02)
    _after_import(fw, target, module)


def _after_import(fw: Framework, target: str, module: ModuleType) -> None:
    try:
        with _LOCK:
            if not fw.state.active:
                return
            if (fw.name, target) not in _HOOKED:
                _HOOKED.add((fw.name, target))
                _register_hook(fw, target)  # (wrapt runs it at once when the module is imported)
            elif sys.modules.get(target) is module:
                _weave(fw, target, module)
    except Exception as exc:
        internal_error(exc, f"framework-{fw.name}")


def _register_hook(fw: Framework, target: str) -> None:
    import wrapt

    def hook(module: ModuleType) -> None:
        try:
            _weave(fw, target, module)
        except Exception as exc:  # never fail the framework's import (a Ctrl-C still interrupts it)
            internal_error(exc, f"framework-{fw.name}")

    wrapt.register_post_import_hook(hook, target)


def _weave(fw: Framework, target: str, module: ModuleType) -> None:
    """The hook body: weave ``target`` of ``fw`` once per activation; a fault unweaves ``fw`` (one warning)."""
    with _LOCK:
        state = fw.state
        if not state.active or (fw.name, target) in _WOVEN:
            return
        try:
            top = target.split(".")[0]
            if top not in fw.distributions:  # (accelerate's hook asks transformers' version)
                top = next(iter(fw.targets)).split(".")[0]
            if top not in state.version_checked:  # imported now: its version, once per weaving
                state.version_checked.add(top)
                version = _version(fw, top)
                if version is not None and not _version_ok(fw, top, version):
                    _deactivate(fw)
                    return
            _WOVEN.add((fw.name, target))
            fw.targets[target](module, Weaver(fw))
        except Exception as exc:
            state.refused = f"{target}: {exc!r}"
            warn_once(
                f"framework-moved-{fw.name}",
                "lens_rl: %s stays unwoven: its target %s is not as tested (%r); lens_rl weaves %s %s",
                fw.name,
                target,
                exc,
                fw.distribution,
                fw.tested,
            )
            _deactivate(fw)


def _deactivate(fw: Framework) -> None:
    state = fw.state
    state.active = False
    for patch in reversed(state.patches):
        try:
            unpatch(patch)
        except Exception as exc:
            internal_error(exc, f"framework-{fw.name}")
    state.patches.clear()
    for key in [k for k in _WOVEN if k[0] == fw.name]:
        _WOVEN.discard(key)
    if fw.unweave is not None:
        try:
            fw.unweave()
        except Exception as exc:
            internal_error(exc, f"framework-{fw.name}")


def _version(fw: Framework, top: str) -> str | None:
    """The installed version of ``fw``'s top package ``top`` (its distribution's metadata, else the module's
    ``__version__``: a stand-in, a source checkout), read in the post-import hook: only a framework being
    imported is asked."""
    import importlib.metadata

    try:
        return importlib.metadata.version(fw.distributions.get(top, fw.distribution))
    except (importlib.metadata.PackageNotFoundError, OSError, ValueError):  # no distribution or unreadable
        version = getattr(sys.modules.get(top), "__version__", None)
        return version if isinstance(version, str) else None


def _version_ok(fw: Framework, top: str, version: str) -> bool:
    if in_range(version, fw.tested):
        return True
    fw.state.refused = f"version {version} outside {fw.tested}"
    warn_once(
        f"framework-version-{fw.name}",
        "lens_rl: %s %s is outside the tested range %s: left unwoven",
        fw.distributions.get(top, fw.distribution),
        version,
        fw.tested,
    )
    return False
