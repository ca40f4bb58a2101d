"""The generated wrappers: the wrapped function's exact signature, name and kind (sync, async, generators), and records made once telemetry starts."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest

import lens_rl
from lens_rl import testing, traced_phase
from lens_rl.testing import OTLPReceiver, SpanRecorder
from tests.conftest import driver_job, job_root
from tests.stores import rollup


def _attrs(span: object) -> dict:
    return dict(span.attributes)  # type: ignore[attr-defined]


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


def test_a_wrapper_pickled_by_value_reads_the_live_runtime() -> None:
    """The runtime a generated wrapper holds pickles as a reference to the one live instance."""
    import pickle

    from lens_rl._runtime import RUNTIME

    assert pickle.loads(pickle.dumps(RUNTIME)) is RUNTIME


@pytest.mark.parametrize("state", ["off", "on"])
def test_async_generators_forward_asend_athrow_and_aclose(state: str) -> None:
    """A traced async generator behaves like the bare one, on and off: asend, athrow and aclose reach it."""
    expected = asyncio.run(_drive_echo(lambda fn: fn))
    if state == "off":
        assert asyncio.run(_drive_echo(traced_phase("rollout"))) == expected
        return
    with testing.recording() as rec:
        assert asyncio.run(_drive_echo(traced_phase("rollout"))) == expected
        assert rec.names() == ["rollout"] * 4  # asend, asend, athrow, asend: one span per resumption
    assert expected == [0, ("got", "a"), 1, ("caught", "k"), "recovered", 1, "closed"]


def test_sync_generators_forward_send_throw_and_close() -> None:
    """A traced generator forwards send, throw and close, and its return value, as the bare one does."""
    log: list[Any] = []

    @traced_phase("data_loading")
    def gen():  # type: ignore[no-untyped-def]
        try:
            value = yield 1
            log.append(value)
            try:
                yield 2
            except ValueError:
                log.append("thrown")
                yield 3
            return "done"
        finally:
            log.append("closed")

    with testing.recording() as rec:
        g = gen()
        assert next(g) == 1 and g.send("x") == 2 and g.throw(ValueError()) == 3
        with pytest.raises(StopIteration) as stop:
            next(g)
        assert stop.value.value == "done" and log == ["x", "thrown", "closed"]
        g2 = gen()
        next(g2)
        g2.close()
        assert log[-1] == "closed" and len(rec.find_all("data_loading")) == 5


def test_a_function_with_its_own_signature_decorates_and_runs() -> None:
    """A function whose __signature__ differs from its code is called with its real arguments."""

    def real(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
        return args, kwargs

    real.__signature__ = inspect.Signature([inspect.Parameter("a", inspect.Parameter.POSITIONAL_OR_KEYWORD)])  # type: ignore[attr-defined]
    wrapped = traced_phase("generation")(real)
    assert str(inspect.signature(wrapped)) == "(a)"
    assert wrapped(1, b=2) == ((1,), {"b": 2})
    with testing.recording() as rec:
        assert wrapped(3) == ((3,), {})
        assert rec.names() == ["generation"]


def test_a_traced_data_loader_stays_out_of_the_steps(receiver: OTLPReceiver) -> None:
    """A traced generator feeding steps: each resumption is its own span under the consumer's context;
    steps stay children of the job root, and goodput counts loading once, as overhead."""
    body = """
@traced_phase("data_loading")
def batches(n):
    for i in range(n):
        time.sleep(0.01)
        yield i

for batch in batches(5):
    with traced_phase("step", step=batch):
        with traced_phase("policy_training"):
            time.sleep(0.05)
"""
    driver_job(receiver, body)
    assert receiver.wait_for_spans(1 + 6 + 5 + 5, 10)
    spans = receiver.spans
    root = job_root(spans)
    loads = [s for s in spans if s["name"] == "data_loading"]
    steps = [s for s in spans if s["name"] == "step"]
    assert len(loads) == 6 and len(steps) == 5  # five items, then the resumption that ends it
    assert len({s["trace_id"] for s in spans}) == 1
    assert all(s["parent_span_id"] == root["span_id"] for s in loads + steps)
    report = rollup(spans)
    train_s = sum(s["end_ns"] - s["start_ns"] for s in spans if s["name"] == "policy_training") / 1e9
    load_s = sum(s["end_ns"] - s["start_ns"] for s in loads) / 1e9
    assert report["job"]["seconds"]["productive"] == pytest.approx(train_s, abs=1e-5)
    assert report["job"]["seconds"]["overhead"] == pytest.approx(load_s, abs=1e-5)
    wall_s = (root["end_ns"] - root["start_ns"]) / 1e9  # goodput is productive over the job's wall
    assert report["goodput"] == pytest.approx(train_s / wall_s, abs=1e-4) and report["goodput"] > 0.5


async def _drive_echo(decorate: Any) -> list[Any]:
    log: list[Any] = []

    @decorate
    async def echo():  # type: ignore[no-untyped-def]
        received = 0
        try:
            while True:
                try:
                    value = yield received
                    log.append(("got", value))
                    received += 1
                except KeyError as exc:
                    log.append(("caught", exc.args[0]))
                    yield "recovered"
        finally:
            log.append("closed")

    gen = echo()
    log.append(await gen.asend(None))
    log.append(await gen.asend("a"))
    log.append(await gen.athrow(KeyError("k")))
    log.append(await gen.asend("b"))
    await gen.aclose()
    return log
