"""The file store's lines: a phase span written from its shape's cached JSON is the line the general writer
gives; any record is one strict-JSON line."""

from __future__ import annotations

import json

import lens_rl
from lens_rl.export.lines import hex_id, json_line, span_line, span_lines, span_row


def test_phase_lines_from_a_shape_are_the_lines_span_row_writes() -> None:
    """The file store writes a phase span from its shape's cached JSON only when that gives the very line
    the general writer gives; spans that changed shape (renamed, attributes set, events, status) take the
    general path."""
    with lens_rl.testing.recording() as rec:
        for step in (1, 1, 2):
            with lens_rl.traced_phase("generation", bucket="productive", step=step, attributes={"m": 'x"y'}):
                pass
        with lens_rl.traced_phase("generation", bucket="productive", step=1) as span:
            span.set_attribute("rl.num_tokens", 7)
        with lens_rl.traced_phase("reward") as span:
            span.update_name("reward_v2")
        with lens_rl.traced_phase("sync", bucket="overhead") as span:
            span.add_event("chunk")
        with lens_rl.traced_phase("step", step=4):  # children sharing a parent, then the parent
            for _ in range(2):
                with lens_rl.traced_phase("inner"):
                    pass
        spans = list(rec.spans)
    for i, span in enumerate(spans):  # neighbours that share a thread, and ones that do not
        span._lens_thread, span._lens_thread_name = (7, 'Main"Thread') if i % 3 else (8, "worker")
    assert len(spans) == 9 and sum(getattr(s, "shape", None) is not None for s in spans) == 6
    expected = [json_line(span_row(s)) for s in spans]
    assert [span_line(s) for s in spans] == expected
    assert span_lines(spans) == expected and span_lines(spans[::-1]) == expected[::-1]  # formats shared in a batch


def test_a_record_with_nan_or_infinities_is_one_strict_json_line() -> None:
    """NaN and infinities, at any depth, are written as strings (strict JSON has neither); tuples and sets as
    lists; ids as fixed-width hex."""
    line = json_line({"a": float("nan"), "b": [float("inf"), (1, float("-inf"))], "c": {2}})
    assert json.loads(line) == {"a": "NaN", "b": ["Infinity", [1, "-Infinity"]], "c": [2]}
    assert "\n" not in line and hex_id(255, 16) == "00000000000000ff"
