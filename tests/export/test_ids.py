"""The job's random numbers are the job's: trace and span ids (lens_rl's phases and third-party spans through
lens_rl's providers) and sampling draws come from lens_rl's own stream, seeded from os.urandom and re-seeded
in a forked child; the job's global random is never read or advanced."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lens_rl import testing
from tests.conftest import run_python
from tests.stores import read_spans

_IDS = """
import json, random
import lens_rl
from opentelemetry import trace
random.seed(1234)                                   # every rank does it (set_seed)
lens_rl.init_telemetry_worker(rank=0, world_size=1)
ids = {"phase": [], "third_party": []}
tracer = trace.get_tracer("some.library")
for _ in range(20):
    with lens_rl.traced_phase("generation") as span:
        ctx = span.get_span_context()
        ids["phase"].append((ctx.trace_id, ctx.span_id))
    with tracer.start_as_current_span("library.call") as span:
        ctx = span.get_span_context()
        ids["third_party"].append((ctx.trace_id, ctx.span_id))
lens_rl.shutdown_telemetry(2000)
print(json.dumps(ids))
"""

_ON = {"LENS_RL_OTEL_ENABLED": "1", "LENS_RL_OTEL_EXPORTER": "none", "LENS_RL_OTEL_METRICS_ENABLED": "0"}


def _ids_of_a_seeded_process() -> dict[str, list[list[int]]]:
    out = run_python(_IDS, env=_ON)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_two_identically_seeded_processes_emit_disjoint_ids() -> None:
    """Two ranks that both call random.seed(1234) get different span and trace ids, for lens_rl's phases and
    for a third-party library's spans made through OpenTelemetry's global tracer."""
    first, second = _ids_of_a_seeded_process(), _ids_of_a_seeded_process()
    for kind in ("phase", "third_party"):
        spans = [{s for _, s in ids[kind]} for ids in (first, second)]
        traces = [{t for t, _ in ids[kind]} for ids in (first, second)]
        assert len(spans[0]) == 20 and len(spans[1]) == 20, kind
        assert not spans[0] & spans[1], kind
        assert not traces[0] & traces[1], kind


_DRAWS = """
import json, os, random
import lens_rl
from opentelemetry import metrics, trace
random.seed(7)
on = os.environ.get("LENS_RL_OTEL_ENABLED") == "1"
if on:
    lens_rl.init_telemetry_worker(rank=0, world_size=1)
tracer = trace.get_tracer("some.library")
counter = metrics.get_meter("some.library").create_counter("library.calls")
draws = []
for step in range(12):
    with lens_rl.traced_phase("step", step=step):
        draws.append(random.random())
        with lens_rl.traced_phase("generation"):
            draws.append(random.random())
            with tracer.start_as_current_span("library.call"):
                counter.add(1)                          # in a sampled span: where exemplars would be drawn
                draws.append(random.random())
    if on:
        lens_rl.flush_telemetry(5000)                   # exports (and their retry jitter) between the draws
    draws.append(random.random())
if on:
    assert lens_rl.shutdown_telemetry(10000), "shutdown lost data"
print(json.dumps(draws))
"""


def _draws(env: dict[str, str]) -> list[float]:
    out = run_python(_DRAWS, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_a_seeded_job_draws_the_same_random_numbers_with_telemetry_on_as_off(
    tmp_path: Path, receiver: testing.OTLPReceiver
) -> None:
    """A job that seeds random draws the very same random.random() values with telemetry off, on with the file
    store, on with sampling at 0.5, and on exporting spans and metrics over OTLP to a real receiver (spans
    recorded): telemetry never changes training."""
    off = _draws({})
    assert len(off) == 48
    store = tmp_path / "traces"
    on_file = _draws({"LENS_RL_OTEL_ENABLED": "1", "LENS_RL_OTEL_TRACE_DIR": str(store), "LENS_RL_OTEL_RUN_ID": "r"})
    sampled = _draws(
        {
            "LENS_RL_OTEL_ENABLED": "1",
            "LENS_RL_OTEL_TRACE_DIR": str(tmp_path / "sampled"),
            "LENS_RL_OTEL_RUN_ID": "r",
            "LENS_RL_OTEL_SAMPLE_RATE": "0.5",
        }
    )
    on_otlp = _draws(
        {
            "LENS_RL_OTEL_ENABLED": "1",
            "LENS_RL_OTEL_EXPORTER": "otlp",
            "LENS_RL_OTEL_ENDPOINT": receiver.endpoint,
            "LENS_RL_OTEL_METRICS_INTERVAL_MS": "100",
        }
    )
    assert on_file == off and sampled == off and on_otlp == off
    assert sum(s["name"] == "library.call" for s in read_spans(store / "r")) == 12
    assert receiver.spans and "library.calls" in receiver.metric_names()


_FORK = """
import json, os, random
import lens_rl
lens_rl.init_telemetry_worker(rank=0, world_size=1)
with lens_rl.traced_phase("before"):
    pass
random.seed(1)
read, write = os.pipe()
pid = os.fork()
ids = []
for _ in range(20):
    with lens_rl.traced_phase("after_fork") as span:
        ids.append(span.get_span_context().span_id)
if pid == 0:
    os.write(write, json.dumps(ids).encode())
    os._exit(0)
os.close(write)
child = json.loads(os.read(read, 1 << 20).decode())
os.waitpid(pid, 0)
lens_rl.shutdown_telemetry(2000)
print(json.dumps({"parent": ids, "child": child}))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_gets_ids_of_its_own() -> None:
    """After os.fork (and the same random.seed in both), the child's span ids differ from the ones its parent
    goes on making."""
    out = run_python(_FORK, env=_ON)
    assert out.returncode == 0, out.stderr[-3000:]
    ids = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(set(ids["parent"])) == 20 and len(set(ids["child"])) == 20
    assert not set(ids["parent"]) & set(ids["child"])


def test_the_id_generator_is_an_opentelemetry_entry_point() -> None:
    """OTEL_PYTHON_ID_GENERATOR=lens_rl finds lens_rl's generator: the entry point loads an IdGenerator whose
    ids are valid and leave the global random where it was."""
    import random
    from importlib.metadata import entry_points

    from opentelemetry.sdk.trace.id_generator import IdGenerator

    (point,) = entry_points(group="opentelemetry_id_generator", name="lens_rl")
    generator = point.load()()
    assert isinstance(generator, IdGenerator)
    state = random.getstate()
    span_ids = {generator.generate_span_id() for _ in range(100)}
    trace_ids = {generator.generate_trace_id() for _ in range(100)}
    assert random.getstate() == state
    assert len(span_ids) == 100 and all(0 < s < 2**64 for s in span_ids)
    assert len(trace_ids) == 100 and all(0 < t < 2**128 for t in trace_ids)


def test_pinned_ids_are_drawn_once_and_only_by_the_pinning_thread() -> None:
    """The job root lens-rl run named gets exactly its ids: inside pinned_ids the thread's next trace and span
    id are the pinned ones, once each; another thread, and later draws, get random ids."""
    import threading

    from lens_rl.export.ids import LensIdGenerator, pinned_ids

    generator = LensIdGenerator()
    other: list[int] = []
    with pinned_ids(7, 9):
        thread = threading.Thread(target=lambda: other.append(generator.generate_span_id()))
        thread.start()
        thread.join()
        assert generator.generate_trace_id() == 7 and generator.generate_span_id() == 9
        assert generator.generate_span_id() != 9 and generator.generate_trace_id() != 7
    assert other and other[0] != 9
    assert generator.generate_span_id() != 9
