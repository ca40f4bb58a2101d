"""traced_phase / traced_worker_init / with_bucket: behaviour on and off."""

from __future__ import annotations

import asyncio
import inspect
import threading
import time

import pytest

import lens_rl
from lens_rl import Bucket, traced_phase, traced_worker_init, with_bucket
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
        ("generation", "productive"), ("generation", "overhead"), ("rollout", "wasted"),
        ("generation", "idle"), ("my_custom_thing", None), ("step", None),
    ]  # fmt: skip
    assert _attrs(lens_spans.find("step")) == {"rl.step": 7}


def test_keyword_attributes_are_rl_prefixed_and_exact_keys_kept(lens_spans: SpanRecorder) -> None:
    """step=3 records rl.step; attributes={} keeps exact keys; rl.bucket can't be overridden."""
    with traced_phase("generation", step=3, attributes={"gen_ai.model": "m", "rl.bucket": "hack"}, bucket="wasted"):
        pass
    assert _attrs(lens_spans.find("generation")) == {"rl.step": 3, "gen_ai.model": "m", "rl.bucket": "wasted"}


def test_nesting_parents_and_one_trace(lens_spans: SpanRecorder) -> None:
    """Nested phases are parent and child in one trace."""
    with traced_phase("step"):
        with traced_phase("generation"):
            pass
    gen, step = lens_spans.find("generation"), lens_spans.find("step")
    assert gen.parent.span_id == step.context.span_id
    assert gen.context.trace_id == step.context.trace_id


def test_sync_async_method_static_classmethod_and_generators(lens_spans: SpanRecorder) -> None:
    """Every callable kind is traced, and the async span covers the awaited body."""

    class Worker:
        @traced_phase("policy_training")
        def train(self, n: int, *, scale: int = 2) -> int:
            return n * scale

        @traced_phase("reward")
        async def reward(self) -> int:
            await asyncio.sleep(0.05)
            return 1

        @traced_phase("logprob")
        @staticmethod
        def logprob(x: int) -> int:
            return x

        @traced_phase("advantage")
        @classmethod
        def advantage(cls, x: int) -> str:
            return cls.__name__ + str(x)

        @traced_phase("data_loading")
        def batches(self, n: int):  # type: ignore[no-untyped-def]
            yield from range(n)

    w = Worker()
    assert w.train(2) == 4 and w.train(2, scale=3) == 6
    assert asyncio.run(w.reward()) == 1
    assert Worker.logprob(5) == 5 and w.advantage(1) == "Worker1"
    assert list(w.batches(3)) == [0, 1, 2]
    names = lens_spans.names()
    # a generator: one span per resumption (three yields, then the one that ends it)
    assert names == ["policy_training", "policy_training", "reward", "logprob", "advantage"] + ["data_loading"] * 4
    reward = lens_spans.find("reward")
    assert (reward.end_time - reward.start_time) >= 45_000_000


def test_async_generator_phase(lens_spans: SpanRecorder) -> None:
    """An async generator is traced one resumption at a time: a span per item and one for the end."""

    @traced_phase("rollout")
    async def stream(n: int):  # type: ignore[no-untyped-def]
        for i in range(n):
            await asyncio.sleep(0)
            yield i

    async def consume() -> list[int]:
        return [x async for x in stream(3)]

    assert asyncio.run(consume()) == [0, 1, 2]
    assert lens_spans.names() == ["rollout"] * 4


def test_user_exception_passes_through_and_is_recorded(lens_spans: SpanRecorder) -> None:
    """The same exception object reaches the caller; the span has status ERROR and an event."""
    boom = KeyError("boom")

    @traced_phase("reward")
    def fails() -> None:
        raise boom

    with pytest.raises(KeyError) as info:
        fails()
    assert info.value is boom
    with pytest.raises(RuntimeError):
        with traced_phase("generation"):
            raise RuntimeError("in with")
    for name in ("reward", "generation"):
        span = lens_spans.find(name)
        assert span.status.status_code.name == "ERROR"
        assert [e.name for e in span.events] == ["exception"]


def test_telemetry_faults_never_reach_user_code(lens_spans: SpanRecorder, monkeypatch: pytest.MonkeyPatch,
                                                 caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
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


def test_decorated_keeps_name_doc_signature_and_coroutine_ness() -> None:
    """Name, qualname, docstring, signature and iscoroutinefunction are preserved."""

    def raw(prompts: list[str], n: int = 4, /, *rest: int, temperature: float = 1.0, **kw: object) -> list[str]:
        """Generate."""
        return prompts

    gen = traced_phase("generation")(raw)

    @traced_phase("reward")
    async def reward(x: int) -> int:
        """Score."""
        return x

    assert (gen.__name__, gen.__doc__, gen.__qualname__) == ("raw", "Generate.", raw.__qualname__)
    assert inspect.signature(gen) == inspect.signature(raw)
    assert inspect.signature(gen, follow_wrapped=False) == inspect.signature(raw)  # the real parameters
    assert inspect.iscoroutinefunction(reward) and not inspect.iscoroutinefunction(gen)
    assert gen(["a"]) == ["a"] and gen(["a"], 2, 3, temperature=0.5, extra=1) == ["a"]
    with pytest.raises(TypeError):
        gen()  # type: ignore[call-arg]


def test_decorated_before_telemetry_starts_records_afterwards(tmp_path: object) -> None:
    """A function decorated while off records once the driver turns telemetry on."""

    @traced_phase("generation")
    def f() -> int:
        return 1

    f()  # resolves: off
    assert lens_rl.get_telemetry_handle() is None
    with lens_rl.testing.recording() as rec:
        assert f() == 1
        assert rec.names() == ["generation"]


def test_lazy_init_from_env_on_first_phase(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first phase in a process whose env says enabled initialises worker telemetry."""
    monkeypatch.setenv("LENS_RL_OTEL_ENABLED", "1")
    monkeypatch.setenv("LENS_RL_OTEL_EXPORTER", "none")
    monkeypatch.setenv("RANK", "0")
    assert lens_rl.get_telemetry_handle() is None
    with traced_phase("generation") as span:
        assert span.is_recording()
    assert lens_rl.get_telemetry_handle() is not None


def test_traced_worker_init_starts_telemetry_first_and_spans_the_body(monkeypatch: pytest.MonkeyPatch) -> None:
    """Telemetry is initialised before the body; the body is inside the init span; no bucket."""
    monkeypatch.setenv("LENS_RL_OTEL_ENABLED", "1")
    monkeypatch.setenv("LENS_RL_OTEL_EXPORTER", "none")
    seen: list[object] = []

    @traced_worker_init("policy.init", worker_group="lm_policy")
    class PolicyWorker:
        """A worker."""

        def __init__(self, rank: int, world_size: int) -> None:
            seen.append(lens_rl.get_telemetry_handle())
            time.sleep(0.02)

    w = PolicyWorker(1, 2)
    assert isinstance(w, PolicyWorker) and PolicyWorker.__doc__ == "A worker."
    assert list(inspect.signature(PolicyWorker).parameters) == ["rank", "world_size"]
    handle = seen[0]
    assert handle is not None
    res = handle.resource.attributes  # type: ignore[attr-defined]
    assert (res["nv.dl.rank"], res["nv.dl.world_size"], res["rl.worker_group"]) == (1, 2, "lm_policy")


def test_traced_worker_init_records_start_up_as_overhead(lens_spans: SpanRecorder) -> None:
    """The init span carries rl.* attributes and is overhead whatever its name, in no step; bucket= overrides."""

    class Gen:
        @traced_worker_init("vllm.init", model="m", step=3)
        def __init__(self) -> None:
            with traced_phase("weight_sync"):
                pass

    @traced_worker_init("policy.init", bucket="wasted")
    class Retry:
        pass

    Gen()
    Retry()
    init = lens_spans.find("vllm.init")
    assert _attrs(init) == {"rl.model": "m", "rl.bucket": "overhead"}
    assert lens_spans.find("weight_sync").parent.span_id == init.context.span_id
    assert _attrs(lens_spans.find("policy.init")) == {"rl.bucket": "wasted"}


def test_traced_worker_init_disabled_runs_constructor_untouched() -> None:
    """Off: the class is the same class and its constructor behaves as before."""

    class A:
        def __init__(self, x: int) -> None:
            self.x = x

    decorated = traced_worker_init("init")(A)
    assert decorated is A and A(4).x == 4
    assert lens_rl.get_telemetry_handle() is None


def test_with_bucket_follows_asyncio_tasks_and_restores(lens_spans: SpanRecorder) -> None:
    """Each task sees its own scope; leaving a scope restores the outer one."""

    async def task(bucket: str | None, name: str) -> None:
        if bucket:
            with with_bucket(bucket):
                await asyncio.sleep(0.01)
                with traced_phase(name):
                    pass
        else:
            await asyncio.sleep(0.01)
            with traced_phase(name):
                pass

    async def main() -> None:
        with with_bucket("idle"):
            await asyncio.gather(task("wasted", "a"), task(None, "b"), task("overhead", "c"))
        with traced_phase("d"):
            pass

    asyncio.run(main())
    got = {s.name: _attrs(s).get("rl.bucket") for s in lens_spans.spans}
    assert got == {"a": "wasted", "b": "idle", "c": "overhead", "d": None}


def test_with_bucket_as_decorator(lens_spans: SpanRecorder) -> None:
    """@with_bucket sets the scope for phases inside the decorated function."""

    @with_bucket("overhead")
    def validate() -> int:
        with traced_phase("generation"):
            return 1

    assert validate() == 1
    assert _attrs(lens_spans.find("generation"))["rl.bucket"] == "overhead"


def test_threads_start_under_the_job_root_and_carriers_cross_threads(tmp_path: object) -> None:
    """A phase in a new thread is a child of the job root; attach_context continues a carrier."""
    with lens_rl.testing.recording() as rec:
        from opentelemetry import trace

        from lens_rl._runtime import RUNTIME

        root = rec.handle.tracer.start_span("rl.job")
        RUNTIME.root_context = trace.set_span_in_context(root)
        with traced_phase("step"):
            carrier = lens_rl.inject_context()

        def work() -> None:
            with traced_phase("free"):
                pass
            with lens_rl.attach_context(carrier):
                with traced_phase("joined"):
                    pass

        t = threading.Thread(target=work)
        t.start()
        t.join()
        with traced_phase("explicit", parent=carrier):
            pass
        step = rec.find("step")
        assert rec.find("free").parent.span_id == root.get_span_context().span_id
        assert rec.find("joined").parent.span_id == step.context.span_id
        assert rec.find("explicit").parent.span_id == step.context.span_id


def test_live_goodput_metrics_are_exclusive(lens_spans: SpanRecorder) -> None:
    """Bucket seconds count nested bucketed time once; durations use ms-to-hours boundaries."""
    with traced_phase("policy_training"):
        time.sleep(0.05)
        with traced_phase("checkpointing"):
            time.sleep(0.1)
    metrics = lens_spans.metrics()
    seconds = {p.attributes["rl.bucket"]: p.value for p in metrics["rl.goodput.bucket_seconds"]}
    train, ckpt = lens_spans.find("policy_training"), lens_spans.find("checkpointing")
    ckpt_s = (ckpt.end_time - ckpt.start_time) / 1e9
    train_s = (train.end_time - train.start_time) / 1e9
    # exact against the spans' own times, whatever the machine's load stretched them to
    assert seconds["overhead"] == pytest.approx(ckpt_s, abs=1e-6) and ckpt_s >= 0.1
    assert seconds["productive"] == pytest.approx(train_s - ckpt_s, abs=1e-6) and train_s - ckpt_s >= 0.05
    hist = metrics["rl.phase.duration"][0]
    assert hist.explicit_bounds[0] == 0.001 and hist.explicit_bounds[-1] >= 3600


def test_sample_rate_samples_top_level_phases_and_children_follow() -> None:
    """sample_rate=0 drops phase spans (children follow their parent) but live metrics still count them."""
    with lens_rl.testing.recording(sample_rate=0.0) as rec:
        with traced_phase("step", step=1):
            with traced_phase("generation"):
                time.sleep(0.01)
        assert rec.spans == []
        points = rec.metrics()["rl.phase.count"]
        assert sum(p.value for p in points) == 2
    with lens_rl.testing.recording(sample_rate=0.5) as rec:
        for _ in range(200):
            with traced_phase("step"):
                with traced_phase("generation"):
                    pass
        steps = rec.find_all("step")
        gens = rec.find_all("generation")
        assert 40 < len(steps) < 160 and len(gens) == len(steps)  # whole subtrees, never orphans


def test_traces_off_metrics_on_still_counts_goodput() -> None:
    """traces_enabled=false: no spans, but the bucket-seconds metric still accumulates."""
    with lens_rl.testing.recording(traces_enabled=False) as rec:
        assert rec.handle.tracer_provider is None
        with traced_phase("policy_training"):
            time.sleep(0.02)
        seconds = {p.attributes["rl.bucket"]: p.value for p in rec.metrics()["rl.goodput.bucket_seconds"]}
        assert seconds["productive"] >= 0.015


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


def test_yielded_span_exposes_the_otel_span_api(lens_spans: SpanRecorder) -> None:
    """The yielded span gives its context and forwards the rest of the OTel span API."""
    with traced_phase("generation") as span:
        ctx = span.get_span_context()
        span.update_name("generation.v2")
    assert ctx.is_valid and lens_spans.find("generation.v2").context.span_id == ctx.span_id
    lens_rl.testing.reset()
    with traced_phase("generation") as off:
        assert not off.get_span_context().is_valid and not off.is_recording()


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
