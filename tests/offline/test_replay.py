"""Replay: a stored run's rows rebuilt as OpenTelemetry spans, ids, times, attributes and resource kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from lens_rl.offline.run.replay import row_to_span
from lens_rl.offline.show.replay import replay
from lens_rl.store import iter_rows, span_files
from lens_rl.testing import OTLPReceiver
from tests.stores import at_ns, span, write_process


def test_a_row_becomes_the_span_it_was(tmp_path: Path) -> None:
    """Its ids, parent (remote kept), times, attributes, kind and status, under its header's resource."""
    write_process(
        tmp_path,
        "lm_policy",
        1,
        7,
        [
            {
                **span("train", 1, 2, "t", parent="d", remote=True, bucket="productive", step=3),
                "k": "CLIENT",
                "st": "ERROR",
            }
        ],
    )
    ((head, row),) = list(iter_rows(span_files(tmp_path)[0]))
    rebuilt = row_to_span(head, row, {})
    assert rebuilt.name == "train" and f"{rebuilt.context.span_id:016x}" == row.s and rebuilt.parent.is_remote
    assert (rebuilt.start_time, rebuilt.end_time) == (at_ns(1_000_000_000), at_ns(2_000_000_000))
    assert dict(rebuilt.attributes) == {"rl.bucket": "productive", "rl.step": 3}
    assert rebuilt.kind.name == "CLIENT" and rebuilt.status.status_code.name == "ERROR"
    assert rebuilt.resource.attributes["rl.worker_group"] == "lm_policy"


def test_replay_sends_a_store_to_a_collector_and_skips_what_otlp_cannot_carry(
    tmp_path: Path, receiver: OTLPReceiver
) -> None:
    """Every span reaches the receiver; a row whose ids are no hex is skipped and counted; a refused collector
    is a RuntimeError."""
    write_process(tmp_path, "driver", 0, 1, [span("a", 0, 1, "a"), {**span("b", 1, 2, "b"), "s": "not-hex"}])
    assert replay(tmp_path, receiver.endpoint) == (1, 1)
    assert receiver.wait_for_spans(1, 5) and receiver.spans[0]["name"] == "a"
    from lens_rl.testing import refused_endpoint

    with pytest.raises(RuntimeError, match="did not accept"):
        replay(tmp_path, refused_endpoint(), timeout_ms=500)
