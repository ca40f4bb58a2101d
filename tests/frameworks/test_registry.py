"""The registry and its post-import hooks, on small stand-in modules written to a temporary folder."""

from __future__ import annotations

import functools
import importlib
import logging
import sys
import threading
import time
from typing import Any

import pytest
import wrapt

from lens_rl.frameworks import _base, _registry
from lens_rl.testing import recording


def _run(module: Any, steps: int = 2) -> None:
    timer = module.Timer()
    for step in range(steps):
        module.run_step(timer, step)


def test_weaving_before_the_import_makes_timer_calls_phases(standin: Any) -> None:
    """instrument() before the framework is imported: its timer's start/stop become phases under a step."""
    fw = standin()
    assert _registry.instrument(fw.name) == [fw.name]
    module = importlib.import_module(fw.name)
    with recording() as rec:
        _run(module)
    assert sorted(rec.names()) == ["gen", "gen", "step", "step"]
    steps = rec.find_all("step")
    assert [s.attributes["rl.step"] for s in steps] == [1, 2]
    gen = rec.find_all("gen")[0]
    assert gen.parent.span_id == steps[0].context.span_id and gen.attributes["rl.bucket"] == "productive"


def test_weaving_after_the_import_patches_the_class_so_names_bound_elsewhere_see_it(standin: Any) -> None:
    """instrument() after the import: a Timer bound under another name before weaving is woven too."""
    fw = standin()
    module = importlib.import_module(fw.name)
    bound_before = module.Timer
    _registry.instrument(fw.name)
    with recording() as rec:
        timer = bound_before()
        timer.start("gen")
        timer.stop("gen")
    assert rec.names() == ["gen"] and timer.log == [("start", "gen"), ("stop", "gen")]


def test_weaving_while_another_thread_imports_the_framework_weaves_it_once_imported(
    standin: Any, tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """instrument() while another thread is still importing the framework (its body has not made the Timer
    yet): no warning, and once the import is done the Timer is woven."""
    fw = standin()
    source = tmp_path / f"{fw.name}.py"
    source.write_text("import time\ntime.sleep(0.5)\n" + source.read_text())
    importer = threading.Thread(target=importlib.import_module, args=(fw.name,))
    importer.start()
    deadline = time.monotonic() + 30
    while fw.name not in sys.modules and time.monotonic() < deadline:
        time.sleep(0.005)
    with caplog.at_level(logging.WARNING, logger="lens_rl"):
        assert _registry.instrument(fw.name) == [fw.name]
    importer.join()
    assert [r.getMessage() for r in caplog.records] == []
    with recording() as rec:
        _run(sys.modules[fw.name], steps=1)
    assert sorted(rec.names()) == ["gen", "step"]


def test_weaving_from_the_frameworks_own_import_does_not_wait_for_it(standin: Any) -> None:
    """instrument() called by the framework's own body while this thread imports it: it does not wait for the
    import it is part of (it returns at once, not after its bounded wait), and the Timer is woven once the
    import is done."""
    fw = standin(
        extra="""
        import time as _time
        from lens_rl.frameworks import _registry as _lens_registry
        _began = _time.monotonic()
        WOVEN = _lens_registry.instrument(__name__)
        TOOK_S = _time.monotonic() - _began
        """
    )
    module = importlib.import_module(fw.name)
    assert module.WOVEN == [fw.name] and module.TOOK_S < _registry.IMPORT_WAIT_S
    deadline = time.monotonic() + 30
    while True:  # (woven by lens_rl's thread as the import ends: a moment after it, at most)
        with recording() as rec:
            _run(module, steps=1)
        if sorted(rec.names()) == ["gen", "step"] or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    assert sorted(rec.names()) == ["gen", "step"]


def test_weaving_from_the_own_import_of_a_framework_that_replaces_its_module_does_not_wait(standin: Any) -> None:
    """A framework whose import puts another module object in its place (transformers' ``_LazyModule``) and
    then calls instrument(): its body's frames still name it, so instrument() returns at once (it waited its
    whole bounded wait: the frames' globals are not the module now in ``sys.modules``)."""
    fw = standin(
        extra="""
        import sys as _sys, time as _time, types as _types
        from lens_rl.frameworks import _registry as _lens_registry
        _lazy = _types.ModuleType(__name__)
        _lazy.__dict__.update(globals())
        _sys.modules[__name__] = _lazy
        _began = _time.monotonic()
        _lazy.WOVEN = _lens_registry.instrument(__name__)
        _lazy.TOOK_S = _time.monotonic() - _began
        """
    )
    module = importlib.import_module(fw.name)
    assert module.WOVEN == [fw.name] and module.TOOK_S < _registry.IMPORT_WAIT_S


@pytest.mark.slow
def test_weaving_while_an_import_waits_for_the_caller_returns_and_weaves_it_once_imported(
    standin: Any, tmp_path: Any
) -> None:
    """instrument() while another thread imports the framework, and that import waits for the caller to go on
    (here: for a file the caller writes after instrument): instrument returns after its bounded wait instead of
    waiting for ever, and the framework is woven once the import ends."""
    fw = standin()
    go = tmp_path / "go"
    source = tmp_path / f"{fw.name}.py"
    body = f"import os, time\nwhile not os.path.exists({str(go)!r}):\n    time.sleep(0.01)\n"
    source.write_text(body + source.read_text())
    importer = threading.Thread(target=importlib.import_module, args=(fw.name,), daemon=True)
    importer.start()
    deadline = time.monotonic() + 30
    while fw.name not in sys.modules and time.monotonic() < deadline:
        time.sleep(0.005)
    woven: list[list[str]] = []
    caller = threading.Thread(target=lambda: woven.append(_registry.instrument(fw.name)), daemon=True)
    caller.start()
    caller.join(_registry.IMPORT_WAIT_S + 60)
    returned = not caller.is_alive()
    go.touch()  # the import goes on (also when instrument did not return: the test ends either way)
    importer.join(60)
    assert returned and woven == [[fw.name]], "instrument() waited for an import that waits for its caller"
    deadline = time.monotonic() + 30
    while True:  # (woven by lens_rl's thread as the import ends: a moment after it, at most)
        with recording() as rec:
            _run(sys.modules[fw.name], steps=1)
        if sorted(rec.names()) == ["gen", "step"] or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    assert sorted(rec.names()) == ["gen", "step"]


def test_instrument_is_idempotent_and_a_subclass_is_not_wrapped_twice(standin: Any) -> None:
    """Weaving twice, or weaving a subclass that inherits a woven method, leaves one wrapper: one span per call."""
    fw = standin()
    module = importlib.import_module(fw.name)
    _registry.instrument(fw.name)
    _registry.instrument(fw.name)
    weaver = _base.Weaver(fw)
    assert weaver.around(module.FastTimer, "start", lambda o, a, k: o(*a, **k)) is False
    assert "start" not in module.FastTimer.__dict__ and len(fw.state.patches) == 2
    with recording() as rec:
        timer = module.FastTimer()
        timer.start("gen")
        timer.stop("gen")
    assert rec.names() == ["gen"]


def test_uninstrument_restores_the_originals_and_leaves_another_tools_wrapper(standin: Any) -> None:
    """After uninstrument the class holds its own functions again; a wrapt wrapper another tool put over
    lens_rl's stays and still runs, with lens_rl's spliced out from under it."""
    fw = standin()
    module = importlib.import_module(fw.name)
    original_start = module.Timer.__dict__["start"]
    original_stop = module.Timer.__dict__["stop"]
    _registry.instrument(fw.name)
    calls = []

    def theirs(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        calls.append(args[0])
        return wrapped(*args, **kwargs)

    wrapt.wrap_function_wrapper(module.Timer, "start", theirs)
    assert _registry.uninstrument(fw.name) == [fw.name]
    assert module.Timer.__dict__["stop"] is original_stop
    still = module.Timer.__dict__["start"]
    assert isinstance(still, wrapt.FunctionWrapper) and still.__wrapped__ is original_start
    with recording() as rec:
        timer = module.Timer()
        timer.start("gen")
        timer.stop("gen")
    assert rec.names() == [] and calls == ["gen"]
    assert _registry.instrument(fw.name) == [fw.name]  # woven again, over the other tool's wrapper
    with recording() as rec:
        timer.start("gen")
        timer.stop("gen")
    assert rec.names() == ["gen"] and calls == ["gen", "gen"]


def _unwoven_under_a_plain_wrapper(fw: Any) -> tuple[Any, Any]:
    """``fw`` woven, then another tool's plain (non-wrapt) wrapper put over its ``Timer.start``, then unwoven:
    the framework's module and that wrapper."""
    module = importlib.import_module(fw.name)
    _registry.instrument(fw.name)
    woven = module.Timer.start

    @functools.wraps(woven)
    def theirs(*args: Any, **kwargs: Any) -> Any:
        return woven(*args, **kwargs)

    module.Timer.start = theirs
    _registry.uninstrument(fw.name)
    return module, theirs


def test_uninstrument_under_a_plain_wrapper_leaves_a_pass_through(standin: Any) -> None:
    """A plain (non-wrapt) wrapper of another tool over lens_rl's stays; lens_rl's beneath it records nothing."""
    fw = standin()
    module, theirs = _unwoven_under_a_plain_wrapper(fw)
    assert module.Timer.__dict__["start"] is theirs
    with recording() as rec:
        timer = module.Timer()
        timer.start("gen")
    assert rec.names() == [] and timer.log == [("start", "gen")]


def test_weaving_again_over_a_plain_wrapper_opens_one_phase_a_start(standin: Any) -> None:
    """uninstrument under another tool's plain wrapper, then instrument: the weave goes on top of that wrapper
    and lens_rl's old one beneath it stays a pass-through (each start one phase, which its stop ends)."""
    fw = standin()
    module, theirs = _unwoven_under_a_plain_wrapper(fw)
    assert _registry.instrument(fw.name) == [fw.name]
    with recording() as rec:
        timer = module.Timer()
        for _ in range(2):
            timer.start("gen")
            timer.stop("gen")
    assert rec.names() == ["gen", "gen"] and timer.log == [("start", "gen"), ("stop", "gen")] * 2


def test_a_version_outside_the_tested_range_warns_once_and_stays_unwoven(
    standin: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A stand-in at 3.0 against a tested range <2: one warning naming the range, nothing patched."""
    fw = standin(version="3.0.1")
    module = importlib.import_module(fw.name)
    with caplog.at_level(logging.WARNING, logger="lens_rl"):
        assert _registry.instrument(fw.name) == []
        assert _registry.instrument(fw.name) == []
    warnings = [r.getMessage() for r in caplog.records if "outside the tested range" in r.getMessage()]
    assert len(warnings) == 1 and ">=1.0,<2" in warnings[0]
    assert "__wrapped__" not in vars(module.Timer.start) and fw.state.patches == []


def test_a_weave_that_fails_does_not_fail_the_import_and_leaves_the_framework_unwoven(
    standin: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A target that moved (the weave raises mid-way): the import succeeds, one warning, the patch already made
    is undone."""

    def weave(module: Any, weaver: _base.Weaver) -> None:
        weaver.around(module.Timer, "start", lambda o, a, k: o(*a, **k))
        weaver.around(module.Timer, "moved_away", lambda o, a, k: o(*a, **k))

    fw = standin(weave=weave)
    with caplog.at_level(logging.WARNING, logger="lens_rl"):
        _registry.instrument(fw.name)
        module = importlib.import_module(fw.name)
    assert module.Timer().start("x") is None
    assert "__wrapped__" not in vars(module.Timer.start)
    assert not fw.state.active and fw.state.refused and "moved_away" in fw.state.refused
    assert any("stays unwoven" in r.getMessage() for r in caplog.records)


def test_user_exceptions_pass_through_a_woven_timer_unchanged(standin: Any) -> None:
    """An exception raised by the framework's own timer reaches the caller as the same object."""
    boom = RuntimeError("theirs")

    def weave(module: Any, weaver: _base.Weaver) -> None:
        weaver.around(module.Timer, "start", lambda o, a, k: o(*a, **k))

    fw = standin(weave=weave, extra="\ndef _boom(self, name):\n    raise self.exc\nTimer.start = _boom\n")
    module = importlib.import_module(fw.name)
    _registry.instrument(fw.name)
    timer = module.Timer()
    timer.exc = boom
    with recording(), pytest.raises(RuntimeError) as caught:
        timer.start("gen")
    assert caught.value is boom


def test_unknown_names_raise_with_a_did_you_mean() -> None:
    """instrument('trll') is a ValueError that suggests 'trl' and lists what is supported."""
    with pytest.raises(ValueError, match="did you mean 'trl'.*verl"):
        _registry.instrument("trll")


def test_version_ranges() -> None:
    """Missing release parts count as zero (1.16 == 1.16.0); a pre-release of 2 is before 2 (PEP 440)."""
    assert _base.in_range("1.16.0", ">=1.16,<2") and _base.in_range("1.16", ">=1.16.0")
    assert not _base.in_range("2.0.0rc1", ">=1.16,<2") and not _base.in_range("0.9.1", ">0.9.1")
    assert _base.in_range("0.9.1", "==0.9.1")


def test_record_interval_writes_a_back_dated_phase_under_the_current_one() -> None:
    """A timer's record(name, seconds) becomes a phase with those very start and end times, a child of the
    current phase, bucketed by the default table."""
    import time

    from lens_rl.frameworks._base import StepUmbrella, record_interval

    steps = StepUmbrella("step")
    with recording() as rec:
        steps.begin(7)
        end = time.time_ns()
        record_interval("generation", end - 2_000_000, end)
        steps.end()
    span, step = rec.find("generation"), rec.find("step")
    assert span.end_time - span.start_time == 2_000_000 and span.end_time == end
    assert span.parent.span_id == step.context.span_id and span.attributes["rl.bucket"] == "productive"
    assert step.attributes["rl.step"] == 7 and span.attributes["rl.step"] == 7
