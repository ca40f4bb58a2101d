"""``lens-rl run``'s children keep their last spans: a ``multiprocessing.Pool`` worker that ``Pool``'s
``terminate()`` kills (SIGTERM, no ``atexit``) and a plain Ray actor that ``ray.shutdown()`` ends have written
every span that ended before they replied; and the write costs a woven child a hung collector once only."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import clean_env

LENS_RL = [sys.executable, "-m", "lens_rl"]

#: The documented idiom: ``with Pool() as p: p.map(...)``; leaving the block terminates the workers.
POOL_JOB = """
import multiprocessing as mp, sys, time
from lens_rl import traced_phase

def work(i):
    with traced_phase("reward", step=1):
        time.sleep(0.02)
    return i

if __name__ == "__main__":
    with traced_phase("step", step=1):
        with mp.get_context(sys.argv[1]).Pool(2) as pool:
            print(pool.map(work, range(4)), flush=True)
"""

#: One plain actor (not known to lens_rl), three steps, then ``ray.shutdown()`` right after the last reply.
RAY_JOB = """
import time, ray
from lens_rl import traced_phase

ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, logging_level="ERROR")

@ray.remote
class Gen:
    def generate(self, step):
        with traced_phase("generation", step=step):
            time.sleep(0.05)
        return step

gen = Gen.remote()
for step in range(1, 4):
    with traced_phase("step", step=step):
        ray.get(gen.generate.remote(step))
ray.shutdown()
print("done", flush=True)
"""


def _names(store: Path, prefix: str) -> list[str]:
    names = []
    for path in store.glob(f"{prefix}*.jsonl"):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if "n" in row:
                names.append(row["n"])
    return names


def _run(tmp_path: Path, script: str, *args: str) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "job.py").write_text(textwrap.dedent(script))
    out = subprocess.run(
        [*LENS_RL, "run", "--trace-dir", "t", "--run-id", "r", "--", sys.executable, "job.py", *args],
        env=clean_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return tmp_path / "t" / "r"


@pytest.mark.slow
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_pool_workers_terminated_by_the_with_block_keep_every_span(tmp_path: Path, method: str) -> None:
    """Under lens-rl run, every ``reward`` span of ``with Pool(2) as p: p.map(f, range(4))`` is in the store
    (the block's exit terminates the workers without ``atexit``), round after round."""
    for round_ in range(3):
        store = _run(tmp_path / str(round_), POOL_JOB, method)
        assert _names(store, "spans-worker").count("reward") == 4


@pytest.mark.slow
def test_a_plain_ray_actor_keeps_its_last_span_at_ray_shutdown(tmp_path: Path) -> None:
    """Under lens-rl run, a plain actor's three ``generation`` spans are all in the store when the driver calls
    ``ray.shutdown()`` right after the last reply (Ray ends the worker without ``atexit``)."""
    store = _run(tmp_path, RAY_JOB)
    assert _names(store, "spans-worker").count("generation") == 3


def test_an_idle_flush_that_cannot_settle_turns_itself_off() -> None:
    """A woven child whose collector hangs pays for the idle flush once (bounded), then never again."""
    from lens_rl.config import TelemetryConfig
    from lens_rl.export.handle import TelemetryHandle

    handle = TelemetryHandle(TelemetryConfig(enabled=True, exporter="none"), {"service.name": "t"}, role="lazy")
    own = handle.span_pipeline
    try:
        calls: list[float] = []

        class Hung:
            accepted, exported, failed = 1, 0, 0

            def flush(self, timeout_s: float) -> bool:
                calls.append(timeout_s)
                return False

        handle.span_pipeline = Hung()  # type: ignore[assignment]
        handle.flush_idle = True
        handle.flush_when_idle()
        handle.flush_when_idle()
        assert len(calls) == 1 and calls[0] <= 1.0
        assert handle.flush_idle is False
    finally:
        handle.span_pipeline = own
        handle.shutdown(1000)
