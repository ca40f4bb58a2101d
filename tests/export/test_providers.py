"""The live global providers: a third-party tracer or meter obtained at any time records through the current handle."""

from __future__ import annotations

from lens_rl.testing import OTLPReceiver
from tests.conftest import run_python


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
    env = {
        "LENS_RL_OTEL_ENABLED": "1",
        "LENS_RL_OTEL_EXPORTER": "otlp",
        "LENS_RL_OTEL_ENDPOINT": receiver.endpoint,
        "TRACEPARENT": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    }
    out = run_python(code, env=env)
    assert out.returncode == 0, out.stderr
    assert receiver.wait_for_spans(2, 10)
    op = next(s for s in receiver.spans if s["name"] == "thirdparty.op")
    assert op["resource"]["rl.worker_group"] == "rollout" and op["resource"]["nv.dl.rank"] == 3
    assert op["scope"] == "thirdparty.lib"
    assert op["trace_id"] == "0af7651916cd43dd8448eb211c80319c"  # outside every span: it joins the job
    points = [
        (rm.resource, m)
        for req in receiver.metric_requests
        for rm in req.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == "thirdparty.requests"
    ]
    assert points, receiver.metric_names()
    resource, metric = points[-1]
    group = next(kv.value.string_value for kv in resource.attributes if kv.key == "rl.worker_group")
    assert group == "rollout" and metric.sum.data_points[0].as_int == 5
