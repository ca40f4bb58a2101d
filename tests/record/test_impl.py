"""The C entry point and the pure-Python traced_phase behave the same (lens_rl.record._impl chooses)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

import lens_rl
from lens_rl import Bucket, testing
from lens_rl._runtime import ACTIVE, RUNTIME
from lens_rl.record import _impl
from lens_rl.record import phases as aspects
from lens_rl.record.spans import NOOP_SPAN
from tests.conftest import clean_env, run_python

IMPLS: list[Any] = [pytest.param(aspects._traced_phase_py, id="python")]
if _impl.ACCELERATED:
    IMPLS.append(pytest.param(aspects.traced_phase, id="c"))


def _off() -> None:
    testing.reset()
    aspects._traced_phase_py("resolve")(lambda: None)()  # first call resolves the env: off
    assert RUNTIME.on is False


def test_the_accelerator_is_built_where_a_compiler_is() -> None:
    """With a C compiler present, the install built lens_rl.record._speedups and traced_phase uses it."""
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler: the pure-Python path serves")
    if "lens_rl.record._speedups" in sys.modules and sys.modules["lens_rl.record._speedups"] is None:
        pytest.skip("this run blocks the accelerator (the pure-Python run)")
    assert _impl.ACCELERATED and lens_rl.traced_phase is not aspects._traced_phase_py


@pytest.mark.parametrize("tp", IMPLS)
def test_plain_calls_return_the_cached_phase(tp: Callable[..., Any]) -> None:
    """traced_phase(name) returns one shared Phase per name, enabled or not."""
    _off()
    first = tp("generation")
    assert isinstance(first, aspects.Phase) and tp("generation") is first


@pytest.mark.parametrize("tp", IMPLS)
def test_keyword_calls_while_off_are_lazy_and_complete(tp: Callable[..., Any]) -> None:
    """While off, keyword calls keep every argument; string buckets are validated and coerced."""
    _off()
    lazy = tp("reward", bucket=Bucket.IDLE, step=3, attributes={"k": "v"})
    assert lazy.name == "reward" and lazy.kwargs == {"bucket": Bucket.IDLE, "step": 3, "attributes": {"k": "v"}}
    assert tp("reward", bucket="wasted").kwargs == {"bucket": Bucket.WASTED}
    with tp("reward", bucket=None, step=1) as span:
        span.set_attribute("x", 1)


@pytest.mark.parametrize("tp", IMPLS)
@pytest.mark.parametrize("bad", ["useful", 3, object(), ["productive"]])
def test_invalid_buckets_raise_on_and_off(tp: Callable[..., Any], bad: object) -> None:
    """An invalid bucket is a ValueError naming what is allowed, whatever the state."""
    _off()
    with pytest.raises(ValueError, match="allowed: productive"):
        tp("x", bucket=bad)
    with testing.recording(), pytest.raises(ValueError, match="allowed: productive"):
        tp("x", bucket=bad, step=1)


@pytest.mark.parametrize("tp", IMPLS)
def test_bad_calls_fail_like_a_python_function(tp: Callable[..., Any]) -> None:
    """Wrong arity is a TypeError; a non-string name is a ValueError naming it."""
    _off()
    with pytest.raises(TypeError):
        tp()
    with pytest.raises(TypeError):
        tp("a", "b")
    with pytest.raises(ValueError, match="non-empty string"):
        tp(["unhashable"])
    for name in (["unhashable"], "", "  ", None):
        with pytest.raises(ValueError, match="non-empty string"):
            tp(name, step=1)


@pytest.mark.parametrize("tp", IMPLS)
def test_names_remembered_as_valid_stay_bounded(tp: Callable[..., Any]) -> None:
    """While off, names checked valid are remembered (one lookup next time) up to the cache's bound."""
    _off()
    for i in range(aspects._CACHE_MAX + 10):
        tp(f"phase-{i}", step=1)
    assert len(aspects._VALID_NAMES) <= aspects._CACHE_MAX
    with pytest.raises(ValueError, match="non-empty string"):
        tp(" ", step=1)  # never remembered


@pytest.mark.parametrize("tp", IMPLS)
def test_lazy_phases_decorate_and_record_once_on(tp: Callable[..., Any]) -> None:
    """A keyword phase made while off decorates, and records with its attributes once on."""
    _off()

    @tp("policy_training", step=9, attributes={"gen_ai.model": "m"})
    def train() -> int:
        return 1

    stored = tp("checkpointing", step=9)
    with testing.recording() as rec:
        assert train() == 1
        with stored:
            pass
        with tp("advantage", bucket="idle", step=2):
            pass
        attrs = {s.name: dict(s.attributes) for s in rec.spans}
    assert attrs["policy_training"] == {"gen_ai.model": "m", "rl.step": 9, "rl.bucket": "productive"}
    assert attrs["checkpointing"] == {"rl.step": 9, "rl.bucket": "overhead"}
    assert attrs["advantage"] == {"rl.step": 2, "rl.bucket": "idle"}


def test_pure_python_path_runs_without_the_extension(tmp_path: Any) -> None:
    """With lens_rl.record._speedups unavailable, lens_rl imports, stays off for free and traces when on."""
    out = run_python(
        f"""
        import sys
        sys.modules["lens_rl.record._speedups"] = None  # as if no compiler was there at install time
        import lens_rl
        import lens_rl.testing
        from lens_rl import traced_phase
        from lens_rl.record import _impl
        assert not _impl.ACCELERATED and traced_phase.__name__ == "_traced_phase_py"
        with traced_phase("generation", step=1):
            pass
        lens_rl.testing.reset()
        lens_rl.init_telemetry_driver({{"telemetry": {{"enabled": True, "trace_dir": {str(tmp_path)!r}}}}}, "grpo")
        with traced_phase("generation", step=1):
            pass
        assert lens_rl.shutdown_telemetry(3000)
        """
    )
    assert out.returncode == 0, out.stderr
    assert list(tmp_path.rglob("spans-*.jsonl"))


@pytest.mark.slow
def test_the_phase_tests_pass_without_the_extension() -> None:
    """The phase, runtime, pickling and lifecycle tests pass as well on the pure-Python path (an install
    without a compiler)."""
    if not _impl.ACCELERATED:
        pytest.skip("this run is the pure-Python one")
    tests = [
        "record/test_phases.py",
        "record/test_impl.py",
        "test_runtime.py",
        "record/test_pickling.py",
        "lifecycle/test_lifecycle.py",
    ]
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    run = (  # before pytest loads lens_rl (its plugin): as if no compiler was there at install time
        "import sys; sys.modules['lens_rl.record._speedups'] = None; import pytest; "
        f"sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', *{[f'tests/{t}' for t in tests]!r}]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", run],
        env=clean_env(),
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert " passed" in out.stdout


@pytest.mark.parametrize("tp", IMPLS)
def test_a_with_phase_while_off_yields_the_noop_span_and_passes_exceptions(tp: Callable[..., Any]) -> None:
    """Off, every ``with`` form (plain, keywords, sync and async) yields the no-op span and lets the body's
    exception through unchanged, then a phase entered on and left after shutdown is still closed."""
    _off()
    from opentelemetry import trace

    error = KeyError("k")
    for phase in (tp("x"), tp("x", step=1), tp("x", bucket="idle", attributes={"a": 1})):
        with pytest.raises(KeyError) as raised, phase as span:
            raise error
        assert raised.value is error and span is NOOP_SPAN

        async def body(phase: Any = phase) -> Any:
            async with phase as span:
                raise LookupError(span)

        with pytest.raises(LookupError) as raised:
            asyncio.run(body())
        assert raised.value.args == (NOOP_SPAN,)

    async def shut_down_inside(phase: Any) -> None:
        async with phase:  # the exit runs after the flag changed
            lens_rl.shutdown_telemetry(1000)
        assert ACTIVE.get() is None and not trace.get_current_span().get_span_context().is_valid  # left

    for enter in ("with", "async with"):
        with testing.recording() as rec:
            if enter == "with":
                with tp("outer", step=2):
                    lens_rl.shutdown_telemetry(1000)  # off from here: the exit must still close the span
                assert ACTIVE.get() is None and not trace.get_current_span().get_span_context().is_valid
            else:
                asyncio.run(shut_down_inside(tp("outer", step=2)))
            with tp("after", step=3):
                pass
            assert [s.name for s in rec.spans] == ["outer"]


@pytest.mark.parametrize("tp", IMPLS)
@pytest.mark.slow
def test_no_reference_or_memory_leak_on_the_hot_paths(tp: Callable[..., Any]) -> None:
    """100,000 calls on each hot shape leave reference counts and traced memory where they were."""
    import gc
    import sys
    import tracemalloc

    _off()
    name, value, bucket = "leak-check", object(), Bucket.OVERHEAD
    tp(name)  # the name is kept once: by the phase cache, and as a name checked valid
    tp(name, step=1)
    gc.collect()  # earlier tests' cyclic garbage may still hold references: counted before, not after
    before = (sys.getrefcount(name), sys.getrefcount(value), sys.getrefcount(bucket))
    tracemalloc.start()
    start = tracemalloc.get_traced_memory()[0]
    for _ in range(100_000):
        with tp(name):
            pass
        with tp(name, bucket=bucket, thing=value):
            pass
        tp(name, thing=value).kwargs  # noqa: B018 - the cold path builds the dict
    gc.collect()
    grown = tracemalloc.get_traced_memory()[0] - start
    tracemalloc.stop()
    assert (sys.getrefcount(name), sys.getrefcount(value), sys.getrefcount(bucket)) == before
    assert grown < 64 * 1024


@pytest.mark.parametrize("tp", IMPLS)
def test_keyword_phases_while_on_are_kept_per_distinct_arguments(tp: Callable[..., Any]) -> None:
    """While on, equal keyword arguments give the one kept Phase; arguments that record differently never
    share one: a value of another type, a keyword versus the same key in attributes=, an unhashable value."""
    with testing.recording():
        first = tp("p", bucket="productive", step=1, attributes={"k": "v"})
        assert isinstance(first, aspects.Phase)
        assert tp("p", bucket="productive", step=1, attributes={"k": "v"}) is first
        assert tp("p", step=1, epoch=1.0, attributes={"k": "v"}).rl_attributes == {"step": 1, "epoch": 1.0}
        as_keyword, as_attribute = tp("p", epoch=1), tp("p", attributes={"epoch": 1})
        assert as_keyword.rl_attributes == {"epoch": 1} and as_attribute.attributes == {"epoch": 1}
        assert as_keyword is not as_attribute and as_keyword is not tp("p", epoch=True)
        assert tp("p", attributes={"k": [1]}) is not tp("p", attributes={"k": [1]})  # unhashable: made each time
        assert tp("p", attributes={"k": [1]}).attributes == {"k": [1]}


@pytest.mark.parametrize("tp", IMPLS)
def test_one_call_shape_is_one_cache_entry_whichever_implementation_met_it(tp: Callable[..., Any]) -> None:
    """While on, 10 distinct keyword calls (made again, through either implementation) keep 10 entries, so the
    cache's 4,096-entry bound holds 4,096 argument sets."""
    with testing.recording():
        before = len(RUNTIME.phase_cache)
        for i in range(10):
            phase = tp("shape", bucket="productive", step=i, attributes={"k": i})
            assert aspects._traced_phase_py("shape", bucket="productive", step=i, attributes={"k": i}) is phase
            assert tp("shape", bucket="productive", step=i, attributes={"k": i}) is phase
        assert len(RUNTIME.phase_cache) - before == 10


def test_the_entry_point_shows_the_one_docstring() -> None:
    """help(lens_rl.traced_phase) shows the one docstring and signature, whichever implementation serves."""
    import inspect

    assert inspect.getdoc(lens_rl.traced_phase) == inspect.getdoc(aspects._traced_phase_py)
    assert "generators" in (inspect.getdoc(lens_rl.traced_phase) or "")
    assert list(inspect.signature(lens_rl.traced_phase).parameters) == [
        "name",
        "bucket",
        "parent",
        "attributes",
        "rl_attributes",
    ]


@pytest.mark.parametrize("tp", IMPLS)
def test_the_yielded_span_never_changes_the_bucket_or_step(tp: Callable[..., Any]) -> None:
    """set_attribute / set_attributes of rl.bucket or rl.step on a phase's span are dropped (the bucket and step
    were decided when it opened), so the recorded span and live step_goodput agree; other keys are kept."""
    with testing.recording() as rec:
        with tp("step", step=0):
            with tp("policy_training") as span:
                span.set_attribute("rl.bucket", "wasted")
                span.set_attribute("rl.step", 7)
                span.set_attributes({"rl.bucket": "idle", "rl.step": "x", "rl.kept": 1})
                span.set_attributes([("rl.bucket", "wasted")])
        live = lens_rl.step_goodput()
        attrs = dict(rec.find("policy_training").attributes)
    assert attrs == {"rl.bucket": "productive", "rl.step": 0, "rl.kept": 1}
    assert live["seconds"]["wasted"] == 0 and live["seconds"]["productive"] > 0


@pytest.mark.parametrize("tp", IMPLS)
def test_a_step_that_is_not_an_int_is_refused_on_and_off(tp: Callable[..., Any]) -> None:
    """step= of a str, a bool, a float or an int past 64 bits is a ValueError naming the step, the value and what
    is allowed, at the call, whether telemetry is on or off; an int, a numpy-like integer and None are steps."""

    class Index:  # what numpy integers are to Python: no int, an __index__
        def __index__(self) -> int:
            return 3

    bad = ["2", True, float("nan"), 2.0, 2**63, [1]]
    _off()
    for on in (False, True):
        with testing.recording() if on else contextlib.nullcontext():
            for step in bad:
                with pytest.raises(ValueError, match=r"step must be an int in \[-2\*\*63, 2\*\*63\), got "):
                    tp("generation", step=step)
                with pytest.raises(ValueError, match="step must be an int"):
                    tp("generation", bucket="idle", attributes={"k": 1}, step=step)
            for step in (0, -(2**63), Index(), None):
                with tp("generation", step=step):
                    pass


def test_a_step_that_is_not_an_int_given_another_way_is_left_out() -> None:
    """An rl.step of another type that reaches a phase without step= (attributes=, a woven framework's phase) is
    left out of its span, never written as a step no reader takes; an int is kept."""
    from lens_rl.frameworks._phases import close_phase, open_phase

    with testing.recording() as rec:
        with lens_rl.traced_phase("a", attributes={"rl.step": "2"}):
            pass
        with lens_rl.traced_phase("b", attributes={"rl.step": 2}):
            pass
        close_phase(open_phase("c", step=1.5), None)
        attrs = {s.name: dict(s.attributes).get("rl.step") for s in rec.spans}
    assert attrs == {"a": None, "b": 2, "c": None}


@pytest.mark.parametrize("tp", IMPLS)
def test_a_huge_string_argument_is_capped_never_keyed(tp: Callable[..., Any]) -> None:
    """A string past the 4096-character cap given as a keyword or in attributes= is never hashed nor used as a
    key of the phase cache (hashing costs in proportion to its size): the phase is made each time, its value
    capped."""
    import ctypes

    def hashed(text: str) -> bool:  # CPython keeps a str's hash once computed (-1: not yet)
        return ctypes.c_ssize_t.from_address(id(text) + 3 * ctypes.sizeof(ctypes.c_ssize_t)).value != -1

    huge = "s" * (1 << 20)
    with testing.recording() as rec:
        before = len(RUNTIME.phase_cache)
        with tp("generation", prompt=huge):
            pass
        with tp("generation", attributes={"prompt": huge}):
            pass
        assert sys.implementation.name != "cpython" or not hashed(huge)
        with tp("generation", bucket="idle", attributes={"k": 1}, note=huge.encode()):
            pass
        assert len(RUNTIME.phase_cache) == before
        values = [
            s.attributes.get("rl.prompt", s.attributes.get("prompt", s.attributes.get("rl.note"))) for s in rec.spans
        ]
    assert [len(v) for v in values] == [4096] * 3
