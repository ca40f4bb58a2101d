"""traced_worker_init: telemetry started before the constructor's body, start-up as overhead, untouched when off."""

from __future__ import annotations

import inspect
import time

import pytest

import lens_rl
from lens_rl import traced_phase, traced_worker_init
from lens_rl.testing import SpanRecorder


def _attrs(span: object) -> dict:
    return dict(span.attributes)  # type: ignore[attr-defined]


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


def test_traced_worker_init_takes_no_step_from_its_caller(lens_spans: SpanRecorder) -> None:
    """A worker built under a carrier taken inside a step, or in-process inside a step, records no rl.step on its
    init span nor on the phases its constructor runs; the trace parent is kept."""

    @traced_worker_init("policy.init")
    class Worker:
        def __init__(self) -> None:
            with traced_phase("load_model"):
                pass

    with traced_phase("step", step=4):
        with traced_phase("generation") as gen:
            carrier = lens_rl.inject_context()
            Worker()  # in-process, inside the step
    with lens_rl.attach_context(carrier):
        Worker()  # as a worker handed the driver's context
    inits = lens_spans.find_all("policy.init")
    assert [_attrs(s) for s in inits] == [{"rl.bucket": "overhead"}] * 2
    assert [_attrs(s).get("rl.step") for s in lens_spans.find_all("load_model")] == [None, None]
    assert all(s.parent.span_id == gen.get_span_context().span_id for s in inits)
