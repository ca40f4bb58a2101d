"""traced_phase / traced_worker_init / with_bucket: behaviour on and off."""

from __future__ import annotations

import threading
import time

import pytest

import lens_rl
from lens_rl import Bucket, traced_phase, with_bucket
from lens_rl.testing import SpanRecorder
from tests.conftest import run_in_threads, run_python


def _attrs(span: object) -> dict:
    return dict(span.attributes)  # type: ignore[attr-defined]


# --------------------------------------------------------------------- disabled


def test_disabled_phase_never_touches_opentelemetry() -> None:
    """Off: decorated calls and with-blocks run, yield a no-op span, and import no OTel."""
    out = run_python(
        """
        import sys, asyncio, lens_rl
        from lens_rl import traced_phase, with_bucket, traced_worker_init
        @traced_phase("generation", bucket="productive", step=1)
        def f(x): return x + 1
        @traced_phase("reward")
        async def g(): return 2
        @traced_worker_init("init")
        class W:
            def __init__(self, a): self.a = a
        with traced_phase("step", step=1) as span:
            span.set_attribute("k", 1); span.add_event("e"); span.record_exception(ValueError())
            with with_bucket("overhead"):
                assert f(1) == 2 and asyncio.run(g()) == 2 and W(3).a == 3
        print(sorted(m for m in sys.modules if m.startswith(("opentelemetry", "ray", "aiohttp"))))
        """
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_invalid_bucket_raises_enabled_or_not(lens_spans: SpanRecorder) -> None:
    """An invalid bucket is a ValueError at decoration/call time, naming what is allowed."""
    with pytest.raises(ValueError, match="allowed: productive, overhead, idle, wasted"):
        traced_phase("x", bucket="useful")
    with pytest.raises(ValueError, match="invalid bucket"):
        with_bucket("sometimes")
    lens_rl.testing.reset()
    with pytest.raises(ValueError):
        traced_phase("x", bucket=3)


# --------------------------------------------------------------------- enabled


def test_bucket_resolution_order(lens_spans: SpanRecorder) -> None:
    """explicit > innermost with_bucket > default for the phase name > none."""
    with traced_phase("step", step=7):
        with traced_phase("generation"):
            pass
        with with_bucket(Bucket.OVERHEAD):
            with traced_phase("generation"):
                pass
            with with_bucket("wasted"):
                with traced_phase("rollout"):
                    pass
            with traced_phase("generation", bucket="idle"):
                pass
        with traced_phase("my_custom_thing"):
            pass
    buckets = [(s.name, _attrs(s).get("rl.bucket")) for s in lens_spans.spans]
    assert buckets == [
        ("generation", "productive"),
        ("generation", "overhead"),
        ("rollout", "wasted"),
        ("generation", "idle"),
        ("my_custom_thing", None),
        ("step", None),
    ]
    assert _attrs(lens_spans.find("step")) == {"rl.step": 7}


def test_keyword_attributes_are_rl_prefixed_and_exact_keys_kept(lens_spans: SpanRecorder) -> None:
    """step=3 records rl.step; attributes={} keeps exact keys; rl.bucket can't be overridden."""
    with traced_phase("generation", step=3, attributes={"gen_ai.model": "m", "rl.bucket": "hack"}, bucket="wasted"):
        pass
    assert _attrs(lens_spans.find("generation")) == {"rl.step": 3, "gen_ai.model": "m", "rl.bucket": "wasted"}


@pytest.mark.expects_internal_error
def test_telemetry_faults_never_reach_user_code(
    lens_spans: SpanRecorder, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A broken span factory (what every phase starts through) logs one warning; the user's function still
    runs and returns, a ``with`` block still runs, and the user's own exception passes unchanged."""
    calls = []

    def broken(*args: object, **kwargs: object) -> None:
        calls.append(args[0])
        raise RuntimeError("span factory is broken")

    monkeypatch.setattr(lens_spans.handle.fast, "start", broken)

    @traced_phase("generation")
    def f() -> int:
        return 42

    assert f() == 42 and f() == 42
    with traced_phase("reward") as span:
        span.set_attribute("x", 1)
    error = KeyError("mine")
    with pytest.raises(KeyError) as raised, traced_phase("reward"):
        raise error
    assert raised.value is error
    assert calls == ["generation", "generation", "reward", "reward"]  # the fault happened, each time
    warnings = [r for r in caplog.records if r.levelname == "WARNING" and "(phase-start" in r.getMessage()]
    assert len(warnings) == 1 and lens_spans.spans == []


def test_lazy_init_from_env_on_first_phase(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first phase in a process whose env says enabled initialises worker telemetry."""
    monkeypatch.setenv("LENS_RL_OTEL_ENABLED", "1")
    monkeypatch.setenv("LENS_RL_OTEL_EXPORTER", "none")
    monkeypatch.setenv("RANK", "0")
    assert lens_rl.get_telemetry_handle() is None
    with traced_phase("generation") as span:
        assert span.is_recording()
    assert lens_rl.get_telemetry_handle() is not None


def test_phase_made_while_off_and_stored_traces_from_threads_once_on() -> None:
    """A module-level phase made while off records when entered later, from many threads at once."""
    lens_rl.testing.reset()
    traced_phase("warm")  # resolves nothing yet; make the stored objects while off:
    traced_phase("generation")(lambda: None)()
    stored_plain = traced_phase("rollout")
    stored_kw = traced_phase("reward", step=4)
    with lens_rl.testing.recording() as rec:
        barrier = threading.Barrier(8)

        def work() -> None:
            barrier.wait()
            with stored_kw:
                with stored_plain:
                    time.sleep(0.005)

        run_in_threads(work, 8)
        rewards, rollouts = rec.find_all("reward"), rec.find_all("rollout")
        assert len(rewards) == len(rollouts) == 8
        assert all(dict(r.attributes) == {"rl.step": 4, "rl.bucket": "productive"} for r in rewards)
        parents = {r.parent.span_id for r in rollouts}
        assert parents == {r.context.span_id for r in rewards}


def test_phases_made_while_on_keep_each_calls_own_values() -> None:
    """Keyword phases are cached while on, but a value that is equal and of another type (1, 1.0, True), or
    an attributes dict changed in place, still records what this call passed."""
    with lens_rl.testing.recording() as rec:
        attrs = {"k": 1}
        for value in (1, 1.0, True):
            with lens_rl.traced_phase("p", loss=value, attributes=attrs):
                pass
        attrs["k"] = 2
        with lens_rl.traced_phase("p", loss=1, attributes=attrs):
            pass
        recorded = [(s.attributes["rl.loss"], s.attributes["k"]) for s in rec.spans if s.name == "p"]
    assert [(type(v), v, k) for v, k in recorded] == [(int, 1, 1), (float, 1.0, 1), (bool, True, 1), (int, 1, 2)]
