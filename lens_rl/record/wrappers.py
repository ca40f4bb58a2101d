"""Wrappers generated with the wrapped function's exact signature.

Why generated functions and not ``wrapt`` proxies here: on the hot path a wrapt
wrapper that checks a flag costs ~550 ns and binding a method through a wrapt
descriptor ~450 ns, against ~25 ns for a bare call. A generated plain function with
the same parameters costs one flag read and one call when telemetry is off, binds
as a method natively, is what ``inspect``, Ray and asyncio expect (a real function,
a real coroutine function), and pickles like the function it replaces: by reference
when importable, by value under cloudpickle, reading the live flag through the
runtime object (which pickles as a reference to the live one, never a frozen copy).

The runner (a phase or a bucket scope) is a :class:`Runner`: it says how to open and
close its scope, and the four ways of running a callable inside it (sync, async,
generator, async generator) are written once, here. They are called only while
``RUNTIME.on`` is True.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from lens_rl._runtime import RUNTIME

_RESERVED = ("_lens_fn_", "_lens_ph_", "_lens_st_")


class Runner:
    """A scope that generated wrappers run callables in: ``_open`` before, ``_close`` after.

    ``_open()`` returns a token (None: nothing was opened) and ``_close(token, exc)``
    ends exactly that scope, given the exception that left it, if any. Nothing is
    looked up: the token is all that closing needs. A generator is run one
    resumption at a time (each ``next``/``send``/``throw`` until it yields or ends),
    each in its own scope, so between two resumptions the consumer's context is the
    consumer's own. User exceptions are re-raised unchanged.
    """

    __slots__ = ()

    def _open(self) -> Any:
        raise NotImplementedError

    def _close(self, token: Any, exc: BaseException | None) -> None:
        raise NotImplementedError

    def _run(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        token = self._open()
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            self._close(token, exc)
            raise
        self._close(token, None)
        return result

    async def _run_async(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        token = self._open()
        try:
            result = await fn(*args, **kwargs)
        except BaseException as exc:
            self._close(token, exc)
            raise
        self._close(token, None)
        return result

    def _run_gen(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        gen = fn(*args, **kwargs)
        value: Any = None
        thrown: BaseException | None = None
        try:
            while True:
                token = self._open()
                try:
                    if thrown is None:
                        item = gen.send(value)
                    else:
                        pending, thrown = thrown, None
                        item = gen.throw(pending)
                except StopIteration as stop:
                    self._close(token, None)
                    return stop.value
                except BaseException as exc:
                    self._close(token, exc)
                    raise
                self._close(token, None)
                value = None
                try:
                    value = yield item
                except GeneratorExit:
                    raise
                except BaseException as exc:  # thrown in by the consumer: the next resumption
                    thrown = exc
        finally:
            gen.close()


# The async-generator wrapper is written out in the template: an async generator cannot
# delegate with ``yield from``, so the wrapper forwards ``asend``/``athrow``/``aclose``
# itself, the same way on and off (off, ``_lens_r_`` is None and no scope is opened).
_AGEN_BODY = """\
async def {name}({params}):
    _lens_r_ = _lens_ph_ if _lens_st_.on else None
    _lens_g_ = _lens_fn_({args})
    _lens_v_ = None
    _lens_x_ = None
    try:
        while True:
            _lens_t_ = _lens_r_._open() if _lens_r_ is not None else None
            try:
                if _lens_x_ is None:
                    _lens_i_ = await _lens_g_.asend(_lens_v_)
                else:
                    _lens_p_, _lens_x_ = _lens_x_, None
                    _lens_i_ = await _lens_g_.athrow(_lens_p_)
            except StopAsyncIteration:
                if _lens_r_ is not None:
                    _lens_r_._close(_lens_t_, None)
                return
            except BaseException as _lens_e_:
                if _lens_r_ is not None:
                    _lens_r_._close(_lens_t_, _lens_e_)
                raise
            if _lens_r_ is not None:
                _lens_r_._close(_lens_t_, None)
            _lens_v_ = None
            try:
                _lens_v_ = yield _lens_i_
            except GeneratorExit:
                raise
            except BaseException as _lens_e_:
                _lens_x_ = _lens_e_
    finally:
        await _lens_g_.aclose()
"""

_TEMPLATES = {
    "sync": (
        "def {name}({params}):\n"
        "    if _lens_st_.on:\n"
        "        return _lens_ph_._run(_lens_fn_, {args})\n"
        "    return _lens_fn_({args})\n"
    ),
    "async": (
        "async def {name}({params}):\n"
        "    if _lens_st_.on:\n"
        "        return await _lens_ph_._run_async(_lens_fn_, {args})\n"
        "    return await _lens_fn_({args})\n"
    ),
    "gen": (
        "def {name}({params}):\n"
        "    if _lens_st_.on:\n"
        "        return (yield from _lens_ph_._run_gen(_lens_fn_, {args}))\n"
        "    return (yield from _lens_fn_({args}))\n"
    ),
    "agen": _AGEN_BODY,
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
    if not hasattr(fn, "__code__") or "__signature__" in getattr(fn, "__dict__", {}):
        # A function with its own __signature__ is called with its real parameters,
        # which only *args/**kwargs can forward; update_wrapper copies the signature it shows.
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
    return (
        "def _lens_make_(_lens_fn_, _lens_ph_):\n"
        + "".join("    " + line + "\n" for line in body.splitlines())
        + (f"    return {name}\n")
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
    name = (
        raw_name if isinstance(raw_name, str) and raw_name.isidentifier() and raw_name not in _RESERVED else "wrapper"
    )
    source = _source(kind or _kind(fn), sig, name)
    namespace: dict[str, Any] = {"_lens_st_": RUNTIME, "__name__": "lens_rl._generated"}
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
