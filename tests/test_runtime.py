"""The one runtime: process state in one place, phases closed by token, generators and threads right.

Most tests run a small job in a subprocess against a real OTLP receiver on loopback.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import lens_rl
from lens_rl import testing, traced_phase
from lens_rl.record import _impl
from lens_rl.record import phases as aspects
from lens_rl.record.spans import NoopSpan, PhaseSpan, SpanLike
from lens_rl.testing import OTLPReceiver
from tests.conftest import run_in_threads, run_python
from tests.stores import rollup, rollup_recorded

PKG = Path(lens_rl.__file__).parent


def _job(receiver: OTLPReceiver, body: str, *, prelude: str = "", metrics: bool = False, timeout: float = 60) -> Any:
    """Run ``body`` inside a driver job that exports to ``receiver``; fail with the child's stderr."""
    code = (
        "import sys, time, threading, asyncio\n"
        "import lens_rl\n"
        "from lens_rl import traced_phase, with_bucket, attach_context, inject_context\n"
        + prelude
        + f"lens_rl.init_telemetry_driver({{'telemetry': {{'enabled': True, 'exporter': 'otlp', "
        f"'endpoint': {receiver.endpoint!r}, 'metrics_enabled': {metrics!r}, 'metrics_interval_ms': 200}}}}, 'grpo')\n"
        + body
        + "\nassert lens_rl.shutdown_telemetry(10000), 'shutdown lost data'\n"
    )
    out = run_python(code, timeout=timeout)
    assert out.returncode == 0, out.stderr[-4000:]
    return out


def _by_id(spans: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {s["span_id"]: s for s in spans}


def _root(spans: list[dict[str, Any]]) -> dict[str, Any]:
    return next(s for s in spans if s["name"] == "rl.job")


# ---------------------------------------------------------------------- structure


def test_reset_touches_no_other_modules_private_names() -> None:
    """lens_rl.testing.reset resets through the runtime's one reset(), reaching into no private name."""
    tree = ast.parse(inspect.getsource(testing.reset))
    private = [n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr.startswith("_")]
    assert private == []
    imported = [a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names]
    assert "RUNTIME" in imported and all(not name.startswith("_") or name == "RUNTIME" for name in imported)


def test_every_broad_except_goes_through_the_one_boundary() -> None:
    """A broad except in lens_rl re-raises, forwards the exception, or reports it through the boundary."""
    reporters = {"internal_error", "warn_once", "_warn_once"}
    offenders = []
    for path in PKG.rglob("*.py"):
        if path.name == "_errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ExceptHandler):
                continue
            broad = node.type is None or (isinstance(node.type, ast.Name) and node.type.id in ("Exception", "BaseException"))
            if not broad:
                continue
            inner = list(ast.walk(ast.Module(body=node.body, type_ignores=[])))
            reports = any(isinstance(n, ast.Call) and getattr(n.func, "id", None) in reporters for n in inner)
            reraises = any(isinstance(n, ast.Raise) for n in inner)
            forwards = node.name is not None and any(isinstance(n, ast.Name) and n.id == node.name for n in inner)
            if not (reports or reraises or forwards):
                offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []


def test_the_accelerator_reads_the_flag_from_the_runtime() -> None:
    """The entry point (the C one when built) follows RUNTIME.on: off gives a lazy phase, on a real one."""
    from lens_rl._runtime import RUNTIME

    RUNTIME.mark_off()
    lazy = lens_rl.traced_phase("generation", bucket="productive", step=1)
    assert not isinstance(lazy, aspects.Phase)
    if _impl.ACCELERATED:
        assert lazy.kwargs["bucket"] is lens_rl.Bucket.PRODUCTIVE  # a canonical string arrives as its member
    with testing.recording():
        assert isinstance(lens_rl.traced_phase("generation", step=1), aspects.Phase)


def test_a_wrapper_pickled_by_value_reads_the_live_runtime() -> None:
    """The runtime a generated wrapper holds pickles as a reference to the one live instance."""
    import pickle

    from lens_rl._runtime import RUNTIME

    assert pickle.loads(pickle.dumps(RUNTIME)) is RUNTIME


# ---------------------------------------------------------------------- OTel globals


def test_third_party_spans_and_metrics_follow_the_live_handle(receiver: OTLPReceiver) -> None:
    """A tracer and meter taken from OpenTelemetry's globals keep exporting after a lazy handle is replaced."""
    code = """
        import lens_rl
        from opentelemetry import metrics, trace
        with lens_rl.traced_phase("early"):            # starts a lazy handle, group 'worker'
            pass
        tracer = trace.get_tracer("thirdparty.lib")
        counter = metrics.get_meter("thirdparty.lib").create_counter("thirdparty.requests")
        lens_rl.init_telemetry_worker(rank=3, world_size=4, worker_group="rollout")  # replaces it
        with tracer.start_as_current_span("thirdparty.op"):
            counter.add(5)
        assert lens_rl.shutdown_telemetry(10000)
    """
    env = {"LENS_RL_OTEL_ENABLED": "1", "LENS_RL_OTEL_EXPORTER": "otlp", "LENS_RL_OTEL_ENDPOINT": receiver.endpoint,
           "TRACEPARENT": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}  # fmt: skip
    out = run_python(code, env=env)
    assert out.returncode == 0, out.stderr
    assert receiver.wait_for_spans(2, 10)
    op = next(s for s in receiver.spans if s["name"] == "thirdparty.op")
    assert op["resource"]["rl.worker_group"] == "rollout" and op["resource"]["nv.dl.rank"] == 3
    assert op["scope"] == "thirdparty.lib"
    assert op["trace_id"] == "0af7651916cd43dd8448eb211c80319c"  # outside every span: it joins the job
    points = [(rm.resource, m) for req in receiver.metric_requests for rm in req.resource_metrics
              for sm in rm.scope_metrics for m in sm.metrics if m.name == "thirdparty.requests"]  # fmt: skip
    assert points, receiver.metric_names()
    resource, metric = points[-1]
    group = next(kv.value.string_value for kv in resource.attributes if kv.key == "rl.worker_group")
    assert group == "rollout" and metric.sum.data_points[0].as_int == 5


# ---------------------------------------------------------------------- threads and tokens


def test_a_shared_lazy_phase_entered_by_racing_threads_loses_nothing(receiver: OTLPReceiver) -> None:
    """A phase made while off, then entered by 8 threads at once while on, with a tiny switch interval:
    every span arrives, each reward under its own thread's generation, each generation under the job."""
    prelude = """
sys.setswitchinterval(1e-6)
lens_rl.init_telemetry_worker()                    # env says off: the runtime resolves to off
shared = traced_phase("generation", step=1)        # so this is a lazy phase
"""
    body = """
assert type(shared).__name__ == "_LazyPhase"
def work():
    for _ in range(30):
        with shared:
            with traced_phase("reward"):
                pass
for _round in range(3):
    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads: t.start()
    for t in threads: t.join()
"""
    _job(receiver, body, prelude=prelude)
    assert receiver.wait_for_spans(3 * 240 * 2 + 1, 20)
    spans = receiver.spans
    by_id, root = _by_id(spans), _root(spans)
    gens = [s for s in spans if s["name"] == "generation"]
    rewards = [s for s in spans if s["name"] == "reward"]
    assert len(gens) == len(rewards) == 720
    assert all(g["parent_span_id"] == root["span_id"] for g in gens)  # none nested under a leaked span
    assert all(by_id[r["parent_span_id"]]["name"] == "generation" for r in rewards)
    assert len({r["parent_span_id"] for r in rewards}) == 720  # exactly one reward in each generation
    assert all(g["attributes"]["rl.step"] == 1 for g in gens)


def test_a_phase_ended_by_shutdown_in_another_thread_restores_the_context() -> None:
    """Shutdown from another thread ends an open phase; its exit still restores the context."""
    from opentelemetry import trace

    with testing.recording():
        with traced_phase("step", step=1):
            t = threading.Thread(target=lambda: lens_rl.shutdown_telemetry(1000))
            t.start()
            t.join()
        assert not trace.get_current_span().get_span_context().is_valid


# ---------------------------------------------------------------------- generators


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
    _job(receiver, body)
    assert receiver.wait_for_spans(1 + 6 + 5 + 5, 10)
    spans = receiver.spans
    root = _root(spans)
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


def test_with_bucket_on_a_partly_consumed_generator_never_leaks(receiver: OTLPReceiver) -> None:
    """with_bucket on a generator holds only while it runs: the consumer's phases keep their own bucket."""
    body = """
@with_bucket("overhead")
def validation_samples():
    for i in range(10):
        with traced_phase("generation", which="validation"):
            pass
        yield i

samples = validation_samples()
next(samples); next(samples)                       # consumed partly, never finished
with traced_phase("generation", which="training"):
    pass
del samples
with traced_phase("reward"):
    pass
"""
    _job(receiver, body)
    assert receiver.wait_for_spans(5, 10)
    gens = [s for s in receiver.spans if s["name"] == "generation"]
    buckets = {(s["attributes"]["rl.which"], s["attributes"]["rl.bucket"]) for s in gens}
    assert buckets == {("validation", "overhead"), ("training", "productive")}
    assert next(s for s in receiver.spans if s["name"] == "reward")["attributes"]["rl.bucket"] == "productive"


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


# ---------------------------------------------------------------------- validation and the span twin


@pytest.mark.parametrize("impl", ["python", "c"])
@pytest.mark.parametrize("state", ["off", "on"])
def test_validation_is_the_same_on_and_off(impl: str, state: str) -> None:
    """Bad names, parents and attributes raise ValueError at the call, whether telemetry is on or off."""
    if impl == "c" and not _impl.ACCELERATED:
        pytest.skip("no C accelerator built")
    tp = aspects._traced_phase_py if impl == "python" else lens_rl.traced_phase
    bad = [(("",), {}), ((None,), {"step": 1}), (("   ",), {"step": 1}), (("x",), {"parent": "abc"}),
           (("x",), {"attributes": [("a", 1)]}), (("x",), {"bucket": "productiv"})]  # fmt: skip
    with testing.recording() if state == "on" else _Off():
        for args, kwargs in bad:
            with pytest.raises(ValueError):
                tp(*args, **kwargs)
        with tp("fine", bucket="overhead", parent={}, attributes={"a": 1}, step=1):
            pass


class _Off:
    def __enter__(self) -> None:
        from lens_rl._runtime import RUNTIME

        RUNTIME.mark_off()

    def __exit__(self, *exc: object) -> None:
        testing.reset()


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


def _public_methods(cls: type) -> dict[str, inspect.Signature]:
    return {name: inspect.signature(getattr(cls, name)) for name in dir(cls)
            if not name.startswith("_") and callable(getattr(cls, name))}  # fmt: skip


def test_the_noop_span_is_the_recording_spans_twin() -> None:
    """The no-op and recording span objects implement the same SpanLike methods with the same signatures."""
    protocol = {name for name in dir(SpanLike) if not name.startswith("_")}
    noop, real = _public_methods(NoopSpan), _public_methods(PhaseSpan)
    assert set(noop) == set(real) == protocol
    assert all(noop[name] == real[name] for name in noop), {n: (noop[n], real[n]) for n in noop if noop[n] != real[n]}
    assert "__getattr__" not in vars(PhaseSpan) and "__getattr__" not in vars(NoopSpan)


ODD_CALLS: list[tuple[str, tuple[Any, ...]]] = [
    ("set_attribute", ("k", object())), ("set_attribute", (None, [1, "a"])),
    ("set_attributes", ([("a", 1)],)), ("set_attributes", ("not a mapping",)), ("set_attributes", (None,)),
    ("add_event", ("e", [("a", 1)])), ("add_event", (None, None, "not a time")),
    ("add_link", ("not a context",)), ("record_exception", ("a string",)), ("record_exception", (ValueError("v"),)),
    ("set_status", ("bogus",)), ("update_name", ("",)), ("update_name", (None,)),
    ("is_recording", ()), ("get_span_context", ()),
]  # fmt: skip


@pytest.mark.parametrize(("method", "args"), ODD_CALLS)
def test_neither_span_raises_on_what_the_other_accepts(method: str, args: tuple[Any, ...]) -> None:
    """Every span method accepts the same odd arguments on and off, without raising."""
    with traced_phase("off_phase") as off_span:
        getattr(off_span, method)(*args)
    with testing.recording():
        with traced_phase("on_phase") as on_span:
            assert isinstance(on_span, PhaseSpan) and isinstance(on_span, SpanLike)
            getattr(on_span, method)(*args)


# ---------------------------------------------------------------------- one exclusive-time rule


def test_live_metric_and_offline_rollup_agree_on_concurrent_children() -> None:
    """A checkpoint with three concurrent reward children in threads: live bucket seconds equal the rollup's."""
    with testing.recording() as rec:
        with traced_phase("checkpointing"):
            carrier = lens_rl.inject_context()

            def reward() -> None:
                with lens_rl.attach_context(carrier), traced_phase("reward"):
                    time.sleep(0.1)

            run_in_threads(reward, 3)
            time.sleep(0.05)
        live = {p.attributes["rl.bucket"]: p.value for p in rec.metrics()["rl.goodput.bucket_seconds"]}
        offline = rollup_recorded(rec.spans)["job"]["seconds"]
    assert live["overhead"] == pytest.approx(offline["overhead"], abs=1e-6) and live["overhead"] > 0.04
    assert live["productive"] == pytest.approx(offline["productive"], abs=1e-6) and live["productive"] > 0.29


def test_runtime_reset_serves_tests_and_forked_children(tmp_path: Path) -> None:
    """A forked child starts with a fresh runtime and writes its own file, never the parent's."""
    out = run_python(
        f"""
        import os, json, lens_rl
        lens_rl.init_telemetry_driver({{"telemetry": {{"enabled": True, "trace_dir": {str(tmp_path)!r},
                                        "metrics_enabled": False}}}}, "grpo")
        with lens_rl.traced_phase("parent_phase"):
            pass
        pid = os.fork()
        if pid == 0:
            from lens_rl._runtime import RUNTIME
            assert RUNTIME.handle is None and RUNTIME.open_phases == {{}}
            with lens_rl.traced_phase("child_phase"):
                pass
            lens_rl.shutdown_telemetry(5000)
            os._exit(0)
        os.waitpid(pid, 0)
        assert lens_rl.shutdown_telemetry(5000)
        print(json.dumps(os.getpid()))
        """
    )
    assert out.returncode == 0, out.stderr
    parent_pid = json.loads(out.stdout)
    from tests.stores import read_spans

    files = {p.name: [r["name"] for r in read_spans(p)] for p in tmp_path.rglob("spans-*.jsonl")}
    parent = next(names for name, names in files.items() if name.endswith(f"-{parent_pid}.jsonl"))
    child = next(names for name, names in files.items() if not name.endswith(f"-{parent_pid}.jsonl"))
    assert "child_phase" not in parent and child == ["child_phase"]


if sys.platform == "win32":  # pragma: no cover
    pytestmark = pytest.mark.skip("fork-based tests")
