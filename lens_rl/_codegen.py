"""Wrappers generated with the wrapped function's exact signature.

Why generated functions and not ``wrapt`` proxies here: on the hot path a wrapt
wrapper that checks a flag costs ~550 ns and binding a method through a wrapt
descriptor ~450 ns, against ~25 ns for a bare call. A generated plain function with
the same parameters costs one flag read and one call when telemetry is off, binds
as a method natively, is what ``inspect``, Ray and asyncio expect (a real function,
a real coroutine function), and pickles like the function it replaces: by reference
when importable, by value under cloudpickle, reading the live flag through the
``lens_rl._state`` module (never a frozen copy).

The runner (a phase or a bucket scope) is a :class:`Runner`: it says how to open and
close its scope, and the four ways of running a callable inside it (sync, async,
generator, async generator) are written once, here. They are called only while
``_state.ON`` is True.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from lens_rl import _state

_RESERVED = ("_lens_fn_", "_lens_ph_", "_lens_st_")


class Runner:
    """A scope that generated wrappers run callables in: ``_open`` before, ``_close`` after.

    ``_open(make_current)`` returns a token (None: nothing was opened) and
    ``_close(token, exc)`` ends the scope, given the exception that left it, if any.
    Generators get ``make_current=False``: they share their consumer's context between
    yields. User exceptions are re-raised unchanged.
    """

    __slots__ = ()

    def _open(self, make_current: bool) -> Any:
        raise NotImplementedError

    def _close(self, token: Any, exc: BaseException | None) -> None:
        raise NotImplementedError

    def _run(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        token = self._open(True)
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            self._close(token, exc)
            raise
        self._close(token, None)
        return result

    async def _run_async(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        token = self._open(True)
        try:
            result = await fn(*args, **kwargs)
        except BaseException as exc:
            self._close(token, exc)
            raise
        self._close(token, None)
        return result

    def _run_gen(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        token = self._open(False)
        try:
            result = yield from fn(*args, **kwargs)
        except BaseException as exc:
            self._close(token, exc)
            raise
        self._close(token, None)
        return result

    async def _run_agen(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        token = self._open(False)
        try:
            async for item in fn(*args, **kwargs):
                yield item
        except BaseException as exc:
            self._close(token, exc)
            raise
        self._close(token, None)

_TEMPLATES = {
    "sync": (
        "def {name}({params}):\n"
        "    if _lens_st_.ON:\n"
        "        return _lens_ph_._run(_lens_fn_, {args})\n"
        "    return _lens_fn_({args})\n"
    ),
    "async": (
        "async def {name}({params}):\n"
        "    if _lens_st_.ON:\n"
        "        return await _lens_ph_._run_async(_lens_fn_, {args})\n"
        "    return await _lens_fn_({args})\n"
    ),
    "gen": (
        "def {name}({params}):\n"
        "    if _lens_st_.ON:\n"
        "        return (yield from _lens_ph_._run_gen(_lens_fn_, {args}))\n"
        "    return (yield from _lens_fn_({args}))\n"
    ),
    "agen": (
        "async def {name}({params}):\n"
        "    if _lens_st_.ON:\n"
        "        async for _lens_item_ in _lens_ph_._run_agen(_lens_fn_, {args}):\n"
        "            yield _lens_item_\n"
        "        return\n"
        "    async for _lens_item_ in _lens_fn_({args}):\n"
        "        yield _lens_item_\n"
    ),
}

_GENERIC = inspect.Signature(
    [
        inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL),
        inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD),
    ]
)


def _kind(fn: Callable[..., Any]) -> str:
    if inspect.isasyncgenfunction(fn):
        return "agen"
    if inspect.iscoroutinefunction(fn):
        return "async"
    if inspect.isgeneratorfunction(fn):
        return "gen"
    return "sync"


def _signature(fn: Callable[..., Any]) -> inspect.Signature:
    if not hasattr(fn, "__code__"):
        return _GENERIC
    try:
        sig = inspect.signature(fn, follow_wrapped=False)
    except (TypeError, ValueError):
        return _GENERIC
    if any(p.name.startswith("_lens_") for p in sig.parameters.values()):
        return _GENERIC
    return sig


def _source(kind: str, sig: inspect.Signature, name: str) -> str:
    params: list[str] = []
    args: list[str] = []
    saw_star = False
    positional_only = False
    for p in sig.parameters.values():
        default = "=None" if p.default is not inspect.Parameter.empty else ""
        if p.kind is p.POSITIONAL_ONLY:
            positional_only = True
            params.append(p.name + default)
            args.append(p.name)
            continue
        if positional_only:
            params.append("/")
            positional_only = False
        if p.kind is p.POSITIONAL_OR_KEYWORD:
            params.append(p.name + default)
            args.append(p.name)
        elif p.kind is p.VAR_POSITIONAL:
            saw_star = True
            params.append("*" + p.name)
            args.append("*" + p.name)
        elif p.kind is p.KEYWORD_ONLY:
            if not saw_star:
                params.append("*")
                saw_star = True
            params.append(p.name + default)
            args.append(f"{p.name}={p.name}")
        else:
            params.append("**" + p.name)
            args.append("**" + p.name)
    if positional_only:
        params.append("/")
    body = _TEMPLATES[kind].format(name=name, params=", ".join(params), args=", ".join(args))
    return "def _lens_make_(_lens_fn_, _lens_ph_):\n" + "".join("    " + line + "\n" for line in body.splitlines()) + (
        f"    return {name}\n"
    )


def decorate(fn: Callable[..., Any], runner: Any) -> Any:
    """Wrap ``fn`` (function, method, staticmethod, classmethod) so ``runner`` runs it while on."""
    if isinstance(fn, staticmethod):
        return staticmethod(decorate(fn.__func__, runner))
    if isinstance(fn, classmethod):
        return classmethod(decorate(fn.__func__, runner))
    if isinstance(fn, type) or not callable(fn):
        raise TypeError(f"{runner!r} decorates functions and methods, not {fn!r}")
    return wrap(fn, runner)


def wrap(fn: Callable[..., Any], runner: Any, *, kind: str | None = None) -> Any:
    """A plain function with ``fn``'s signature: ``fn(...)`` when off, ``runner._run*(fn, ...)`` when on."""
    sig = _signature(fn)
    raw_name = getattr(fn, "__name__", "wrapper")
    name = raw_name if isinstance(raw_name, str) and raw_name.isidentifier() and raw_name not in _RESERVED else "wrapper"
    source = _source(kind or _kind(fn), sig, name)
    namespace: dict[str, Any] = {"_lens_st_": _state, "__name__": "lens_rl._generated"}
    exec(compile(source, f"<lens_rl wrapper of {getattr(fn, '__qualname__', name)}>", "exec"), namespace)
    wrapper = namespace["_lens_make_"](fn, runner)
    if sig is not _GENERIC:
        wrapper.__defaults__ = getattr(fn, "__defaults__", None)
        wrapper.__kwdefaults__ = getattr(fn, "__kwdefaults__", None)
    try:
        functools.update_wrapper(wrapper, fn)
    except (AttributeError, TypeError):
        wrapper.__wrapped__ = fn
    return wrapper
