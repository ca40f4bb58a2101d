"""The phase engine: nesting and parents, exceptions recorded, live exclusive time, threads under the job root, sampling, a phase ended by shutdown."""

from __future__ import annotations

import threading
import time

import pytest

import lens_rl
from lens_rl import testing, traced_phase
from lens_rl.testing import SpanRecorder
from tests.conftest import run_in_threads
from tests.stores import rollup_recorded


def _attrs(span: object) -> dict:
    return dict(span.attributes)  # type: ignore[attr-defined]


def test_nesting_parents_and_one_trace(lens_spans: SpanRecorder) -> None:
    """Nested phases are parent and child in one trace."""
    with traced_phase("step"):
        with traced_phase("generation"):
            pass
    gen, step = lens_spans.find("generation"), lens_spans.find("step")
    assert gen.parent.span_id == step.context.span_id
    assert gen.context.trace_id == step.context.trace_id


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


def test_a_phase_ended_by_shutdown_in_another_thread_restores_the_context() -> None:
    """Shutdown from another thread ends an open phase; its exit still restores the context."""
    from opentelemetry import trace

    with testing.recording():
        with traced_phase("step", step=1):
            t = threading.Thread(target=lambda: lens_rl.shutdown_telemetry(1000))
            t.start()
            t.join()
        assert not trace.get_current_span().get_span_context().is_valid


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


def test_a_phase_opened_without_attaching_is_closed_from_another_thread_and_parents_nothing() -> None:
    """open_node(attach=False) under an explicit parent: the current context is left as it was, a later phase
    is not its child, and another thread closes it with no fault and no context restored."""
    from lens_rl.propagation import phase_parent
    from lens_rl.record.engine import close_node, open_node
    from lens_rl.record.phases import Phase

    with testing.recording() as rec, traced_phase("outer"):
        node = open_node(Phase("loose"), None, phase_parent()[0], False)
        assert node is not None and node.otel_token is None
        with traced_phase("after"):
            pass
        closer = threading.Thread(target=close_node, args=(node, None))
        closer.start()
        closer.join()
        with traced_phase("later"):
            pass
    outer = rec.find("outer").context.span_id
    assert sorted((s.name, s.parent.span_id == outer) for s in rec.spans if s.name != "outer") == [
        ("after", True),
        ("later", True),
        ("loose", True),
    ]
