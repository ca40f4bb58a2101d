"""Weaving correct under any caller (SPEC "Frameworks, zero code"): start/stop timers stopped on another thread
or out of order, uninstrument of implied frameworks, PEP 440 ranges read when the framework is imported, the
profile hook woven at its source, a training whose step counter starts again, and the lifecycle's hook list.

NeMo-RL does not install here (``nemo-rl`` on PyPI is an empty 0.0.0 placeholder), so its ``ThreadSafeTimer``
is the stand-in in ``tests/frameworks/standins/nemo_rl/utils/timer.py``: NeMo-RL's names, signatures and
locking (each method under the timer's ``RLock``), written here.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import logging
import queue
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import lens_rl
from lens_rl._runtime import RUNTIME
from lens_rl.frameworks import _base, _registry, instrument, uninstrument
from lens_rl.frameworks._base import StepUmbrella
from lens_rl.testing import recording
from tests.conftest import run_python
from tests.frameworks.standins import HERE, standin

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def nemo() -> Iterator[None]:
    with standin("nemo_rl", "nemo_rl"):
        yield


def _assert_no_child_of_a_closed_span(rec: Any) -> None:
    """Every span starts while its parent (when recorded here) is still open."""
    by_id = {s.context.span_id: s for s in rec.spans}
    for span in rec.spans:
        parent = by_id.get(span.parent.span_id) if span.parent is not None else None
        if parent is not None:
            assert parent.start_time <= span.start_time <= parent.end_time, (span.name, parent.name)


def test_a_thread_safe_timer_started_in_one_thread_and_stopped_in_another(nemo: None) -> None:
    """A ThreadSafeTimer's labels started on one thread and stopped on the next, 1,000 times across 8 threads:
    each phase is closed by whichever thread stops it, no internal error, nothing left open, and every phase
    (the timer's, and one opened after each stop) is a child of its own thread's phase."""
    instrument("nemo_rl")
    timer = importlib.import_module("nemo_rl.utils.timer").ThreadSafeTimer({"worker": "collector"})
    threads, rounds = 8, 125
    inboxes: list[queue.Queue[str]] = [queue.Queue() for _ in range(threads)]
    failures: list[BaseException] = []

    def work(i: int) -> None:
        try:
            with lens_rl.traced_phase(f"thread{i}"):
                for k in range(rounds):
                    timer.start(f"generation/{i}/{k}")
                    inboxes[(i + 1) % threads].put(f"generation/{i}/{k}")
                    timer.stop(inboxes[i].get(timeout=120))
                    with lens_rl.traced_phase(f"after{i}"):
                        pass
        except BaseException as exc:
            failures.append(exc)

    with recording() as rec:
        workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=300)
        assert RUNTIME.open_phases == {}
    assert failures == [] and not any(worker.is_alive() for worker in workers)
    owner = {rec.find(f"thread{i}").context.span_id: i for i in range(threads)}
    timed = [s for s in rec.spans if s.name.startswith("generation/")]
    after = [s for s in rec.spans if s.name.startswith("after")]
    assert len(timed) == len(after) == threads * rounds
    names = {s.context.span_id: s.name for s in rec.spans}
    for span in timed:
        assert owner.get(span.parent.span_id) == int(span.name.split("/")[1]), (
            span.name,
            names.get(span.parent.span_id),
        )
    for span in after:
        assert owner[span.parent.span_id] == int(span.name[len("after") :]), span.name
    _assert_no_child_of_a_closed_span(rec)


def test_stops_out_of_order_restore_no_stale_context(nemo: None) -> None:
    """start a, start b, stop a, then b, on one thread: no internal error, every phase (the bare starts', a
    time() block's, the job's own) a child of the enclosing phase, none of a closed one."""
    instrument("nemo_rl")
    timer = importlib.import_module("nemo_rl.utils.timer").Timer()
    with recording() as rec, lens_rl.traced_phase("outer"):
        timer.start("a")
        timer.start("b")
        timer.stop("a")
        with timer.time("d"):
            pass
        timer.stop("b")
        with timer.time("e"):
            pass
        with lens_rl.traced_phase("f"):
            pass
    ids = {s.name: s.context.span_id for s in rec.spans}
    parents = {s.name: s.parent.span_id for s in rec.spans if s.name != "outer"}
    assert parents == {name: ids["outer"] for name in "abdef"}
    _assert_no_child_of_a_closed_span(rec)


def test_a_users_loop_importing_the_profile_hook_from_its_source_numbers_its_steps(
    nemo: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A loop of the job's own (not in nemo_rl.algorithms) that imports maybe_gpu_profile_step from
    nemo_rl.utils.nsys after the weave: its umbrellas carry the steps it passes; after uninstrument nothing
    is recorded."""
    (tmp_path / "my_algorithm.py").write_text(
        "from nemo_rl.utils.nsys import maybe_gpu_profile_step\n"
        "from nemo_rl.utils.timer import Timer\n\n"
        "def train(steps):\n"
        "    timer = Timer()\n"
        "    for step in range(steps):\n"
        "        maybe_gpu_profile_step(None, 10 + step)\n"
        "        with timer.time('total_step_time'), timer.time('generation'):\n"
        "            pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    instrument("nemo_rl")
    mine = importlib.import_module("my_algorithm")
    try:
        with recording() as rec:
            mine.train(3)
        assert [s.attributes["rl.step"] for s in rec.find_all("total_step_time")] == [10, 11, 12]
        uninstrument("nemo_rl")
        with recording() as rec:  # the loop's own binding of the woven hook is a pass-through now
            mine.train(2)
        assert rec.names() == []
    finally:
        sys.modules.pop("my_algorithm", None)


def test_a_prerelease_below_the_range_is_refused_when_the_framework_is_imported(
    standin: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ranges are PEP 440: 1.0.0.dev0 is before 1.0, so outside >=1.0,<2 (one warning, nothing patched), while
    an installed 1.5.0rc1 is inside. The version is read when the framework is imported, not at instrument()."""
    asked: list[str] = []
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: asked.append(name) or real(name))
    dev = standin(version="1.0.0.dev0", tested=">=1.0,<2")
    with caplog.at_level(logging.WARNING, logger="lens_rl"):
        assert instrument(dev.name) == [dev.name]  # not imported yet: nothing asked, nothing refused
        assert asked == [] and not [r for r in caplog.records if "outside" in r.getMessage()]
        module = importlib.import_module(dev.name)
    warnings = [r.getMessage() for r in caplog.records if "outside the tested range" in r.getMessage()]
    assert len(warnings) == 1 and "1.0.0.dev0" in warnings[0] and asked == [dev.distribution]
    assert not dev.state.active and dev.state.patches == [] and not hasattr(module.Timer.start, "__wrapped__")
    rc = standin(version="1.5.0rc1", tested=">=1.0,<2")
    importlib.import_module(rc.name)
    assert instrument(rc.name) == [rc.name] and rc.state.patches


def test_version_ranges_are_pep_440() -> None:
    """Pre-, dev- and post-releases compare as PEP 440 says; a version that is not PEP 440 is outside."""
    assert _base.in_range("1.16.0", ">=1.16,<2") and _base.in_range("1.17.0.dev0", ">=1.16,<2")
    assert not _base.in_range("0.9.0.dev0", ">=0.9") and not _base.in_range("2.0.0rc1", ">=1.16,<2")
    assert _base.in_range("0.9.1.post1", ">=0.9.1") and not _base.in_range("0.9.1.post1", ">0.9.1")
    assert not _base.in_range("not-a-version", ">=0")
    with pytest.raises(ValueError):
        _base.in_range("1.0", ">=> 1")


def _requiring(standin: Any) -> tuple[_base.Framework, _base.Framework]:
    """Two stand-ins, the second requiring the first (as trl requires transformers), both imported."""
    base = standin()
    top = standin()
    top = _registry.register(dataclasses.replace(top, requires=(base.name,), state=_base._State()))
    importlib.import_module(base.name)
    importlib.import_module(top.name)
    return base, top


def test_uninstrument_removes_what_a_name_implied(standin: Any) -> None:
    """uninstrument(name) undoes the framework it implied too, every patched attribute back as it was; unless
    that framework was also instrumented by its own name, then it stays woven."""
    base, top = _requiring(standin)
    module = sys.modules[base.name]
    originals = dict(vars(module.Timer))
    assert instrument(top.name) == [base.name, top.name]
    assert uninstrument(top.name) == [top.name, base.name]
    assert dict(vars(module.Timer)) == originals and not base.state.active
    instrument(base.name)
    instrument(top.name)
    uninstrument(top.name)
    assert base.state.active and dict(vars(module.Timer)) != originals


def test_a_training_whose_counter_starts_again_is_a_new_step_series(caplog: pytest.LogCaptureFixture) -> None:
    """Steps 1-3 then 1-2 again under the same telemetry: recorded as 1-5, the framework's own number in
    rl.framework_step, one warning naming the overlap; under new telemetry the count is the framework's again."""
    steps = StepUmbrella("step", loose=True)
    with caplog.at_level(logging.WARNING, logger="lens_rl"), recording() as rec:
        for number in (1, 2, 3, 1, 2):
            steps.begin(number)
            steps.end()
    recorded = [(s.attributes["rl.step"], s.attributes.get("rl.framework_step")) for s in rec.find_all("step")]
    assert recorded == [(1, None), (2, None), (3, None), (4, 1), (5, 2)]
    warned = [r.getMessage() for r in caplog.records if "again" in r.getMessage()]
    assert len(warned) == 1 and "from 1 again (the last was 3)" in warned[0] and "steps 4 on" in warned[0]
    with recording() as rec:
        steps.begin(1)
        steps.end()
    assert [s.attributes["rl.step"] for s in rec.find_all("step")] == [1]


def test_the_lifecycle_weaves_through_the_runtimes_hook_list(tmp_path: Path) -> None:
    """No setup module reaches frameworks/ by name; a lazily started worker whose environment names a framework
    imports and weaves it through RUNTIME.activate_hooks (typed by the Handle Protocol)."""
    for room in ("lifecycle", "config", "identity"):
        for path in (ROOT / "lens_rl" / room).rglob("*.py"):
            assert "import_module(" not in path.read_text(), path  # (an import by name the layout test cannot see)
    done = run_python(
        f"""
        import sys
        sys.path.insert(0, {str(HERE)!r})
        import lens_rl
        from lens_rl._runtime import RUNTIME
        assert RUNTIME.activate_hooks and "lens_rl.frameworks" not in sys.modules
        with lens_rl.traced_phase("first"):  # the lazy start
            pass
        import nemo_rl.utils.timer as timer
        print("lens_rl.frameworks" in sys.modules, getattr(timer.Timer.start, "__lens_rl_framework__", None))
        """,
        env={
            "PYTHONPATH": str(ROOT),
            "LENS_RL_OTEL_ENABLED": "true",
            "LENS_RL_OTEL_TRACE_DIR": str(tmp_path),
            "LENS_RL_OTEL_INSTRUMENT": "nemo_rl",
            "RANK": "0",
        },
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "nemo_rl"]


def test_the_jobs_own_phase_inside_a_woven_step_is_its_child_with_its_step() -> None:
    """A traced_phase opened directly inside a framework's step umbrella (not current: begun and ended by two
    calls) is the umbrella's child and carries its step; one opened on another thread meanwhile, or after the
    step ended, is not under it."""
    steps = StepUmbrella("step", loose=True)
    with recording() as rec:
        steps.begin(7)
        with lens_rl.traced_phase("reward_fn", bucket="productive"):
            pass
        other = threading.Thread(target=_phase_elsewhere)
        other.start()
        other.join()
        steps.end()
        with lens_rl.traced_phase("after", bucket="overhead"):
            pass
    umbrella = rec.find_all("step")[0]
    inside = rec.find_all("reward_fn")[0]
    assert inside.parent.span_id == umbrella.context.span_id and inside.attributes.get("rl.step") == 7
    for name in ("elsewhere", "after"):
        span = rec.find_all(name)[0]
        assert span.parent is None or span.parent.span_id != umbrella.context.span_id, name
    _assert_no_child_of_a_closed_span(rec)


def _phase_elsewhere() -> None:
    with lens_rl.traced_phase("elsewhere", bucket="idle"):
        pass
