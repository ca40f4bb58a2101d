"""with_bucket: the ambient bucket follows asyncio tasks, restores on exit, decorates; never leaks from a generator."""

from __future__ import annotations

import asyncio

from lens_rl import traced_phase, with_bucket
from lens_rl.testing import OTLPReceiver, SpanRecorder
from tests.conftest import driver_job


def _attrs(span: object) -> dict:
    return dict(span.attributes)  # type: ignore[attr-defined]


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
    driver_job(receiver, body)
    assert receiver.wait_for_spans(5, 10)
    gens = [s for s in receiver.spans if s["name"] == "generation"]
    buckets = {(s["attributes"]["rl.which"], s["attributes"]["rl.bucket"]) for s in gens}
    assert buckets == {("validation", "overhead"), ("training", "productive")}
    assert next(s for s in receiver.spans if s["name"] == "reward")["attributes"]["rl.bucket"] == "productive"
