"""Helpers the export tests share: the slack for bounded calls, an OTLP config, a burst of SDK spans."""

from __future__ import annotations

import time

# Scheduling slack on a shared, busy 2-core machine. An unbounded call would take the
# 30 s export timeout (or forever), so this still fails on a real bound violation.
SLACK_S = 0.75


def otlp_config(endpoint: str, **extra: object) -> dict:
    """A driver config exporting over OTLP/HTTP to ``endpoint`` (``extra``: more telemetry fields)."""
    return {
        "telemetry": {"enabled": True, "exporter": "otlp", "endpoint": endpoint, **extra},
        "policy": {"model_name": "tiny-model"},
    }


def burst(handle: object, n: int) -> float:
    """Seconds to start and end ``n`` spans on ``handle``'s tracer."""
    tracer = handle.tracer  # type: ignore[attr-defined]
    t0 = time.perf_counter()
    for _ in range(n):
        tracer.start_span("burst").end()
    return time.perf_counter() - t0
