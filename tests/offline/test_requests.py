"""The requests rollup against hand arithmetic: vLLM's ``llm_request`` spans per worker group (count, end to end
and time-to-first-token quantiles, time in queue, prefill and decode seconds, output tokens per second in
flight), the same whether read cold, through the refresh cache, or in parallel; shown in the table and the
report; absent without request spans."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest

from lens_rl.offline.read.parts import RequestsPart
from lens_rl.offline.read.requests import request_numbers, requests_part
from lens_rl.offline.run.analyze import analyze
from lens_rl.offline.run.cache import cache_folder
from lens_rl.offline.show.requests import format_requests
from lens_rl.offline.show.table import format_table
from lens_rl.store import span_files
from tests.stores import span, write_process


def _request(
    label: str, start_s: float, e2e: float, queue: float, ttft: float, tokens: int, parent: str
) -> dict[str, Any]:
    row = span(
        "llm_request",
        start_s,
        start_s + e2e,
        label,
        parent=parent,
        remote=True,
        **{
            "gen_ai.latency.e2e": e2e,
            "gen_ai.latency.time_in_queue": queue,
            "gen_ai.latency.time_to_first_token": ttft,
            "gen_ai.latency.time_in_model_prefill": ttft - queue,
            "gen_ai.latency.time_in_model_decode": e2e - ttft,
            "gen_ai.usage.prompt_tokens": 3,
            "gen_ai.usage.completion_tokens": tokens,
        },
    )
    row["sc"] = "vllm.tracing.otel"
    return row


def _store(run: Path) -> None:
    """A driver whose step 0 generates for 10 s; a vLLM front-end of group gen with 20 requests, two at a time
    (request i: 1 s end to end, (i % 10) / 100 s in queue, 0.2 s to first token, 50 output tokens), in flight
    for 10 s of wall; a second group's one request."""
    write_process(
        run,
        "driver",
        0,
        1,
        [
            span("rl.job", 0, 12, "job"),
            span("step", 0, 11, "s0", parent="job", step=0),
            span("generate", 0, 10, "g0", parent="s0", bucket="productive"),
        ],
        root="job",
        role="driver",
    )
    gen = [_request(f"r{i}", (i // 2) * 1.0, 1.0, (i % 10) / 100, 0.2, 50, "g0") for i in range(20)]
    write_process(
        run, "gen", 0, 2, gen, name="spans-gen-0-vllm-front-end-2.jsonl", **{"vllm.process_kind": "front-end"}
    )
    write_process(run, "other", 0, 3, [_request("x", 0, 2.0, 0.5, 1.0, 10, "g0")])


def test_requests_rows_by_hand(tmp_path: Path) -> None:
    """Each group's row is the arithmetic of its request spans (nearest-rank quantiles)."""
    run = tmp_path / "r1"
    _store(run)
    rows = {r["worker_group"]: r for r in analyze(span_files(run))["requests"]}
    assert set(rows) == {"gen", "other"}
    gen = rows["gen"]
    assert gen["requests"] == 20 and gen["output_tokens"] == 1000
    assert gen["e2e_p50_s"] == gen["e2e_p95_s"] == 1.0
    assert gen["queue_p95_s"] == 0.09  # queues 0.00 .. 0.09, twice each: the 19th of 20
    assert gen["queue_share"] == pytest.approx(0.9 / 20)  # (2 x 0.45 s) over 20 s end to end
    assert gen["ttft_p50_s"] == gen["ttft_p95_s"] == 0.2
    assert gen["decode_s"] == pytest.approx(16.0) and gen["prefill_s"] == pytest.approx(4.0 - 0.9)
    assert gen["busy_s"] == 10.0 and gen["output_tokens_per_s"] == 100.0  # 1000 tokens over 10 s in flight
    other = rows["other"]
    assert (other["requests"], other["queue_share"], other["output_tokens_per_s"]) == (1, 0.25, 5.0)


def test_cold_cached_and_parallel_reads_agree(tmp_path: Path) -> None:
    """The rollup is the same read cold, in parallel, and through the refresh cache (twice)."""
    run = tmp_path / "r1"
    _store(run)
    paths = span_files(run)
    cold = analyze(paths, jobs=1)["requests"]
    assert analyze(paths, jobs=2)["requests"] == cold
    assert analyze(paths, jobs=1, cache=cache_folder(run))["requests"] == cold
    assert analyze(paths, jobs=1, cache=cache_folder(run))["requests"] == cold


def test_a_grown_file_adds_its_new_requests(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A second look through the cache counts the requests written since the first, once, from the cache
    entries the first kept (a vLLM process's part loads from the cache: it is not read cold)."""
    run = tmp_path / "r1"
    _store(run)
    folder = cache_folder(run)
    assert analyze(span_files(run), cache=folder)["requests"][0]["requests"] == 20
    front = run / "spans-gen-0-vllm-front-end-2.jsonl"
    with front.open("a") as handle:
        handle.write(json.dumps(_request("late", 10.0, 1.0, 0.0, 0.2, 50, "g0")) + "\n")
    assert analyze(span_files(run), cache=folder)["requests"][0]["requests"] == 21
    assert "not used" not in caplog.text
    assert analyze(span_files(run))["requests"][0]["requests"] == 21


def test_no_rows_without_request_spans(tmp_path: Path) -> None:
    """A job without vLLM request spans has an empty rollup and no table section; a span named llm_request
    without vLLM's latency is not a request."""
    run = tmp_path / "r1"
    write_process(run, "driver", 0, 1, [span("llm_request", 0, 1, "a", bucket="productive")], role="driver")
    report = analyze(span_files(run))
    assert report["requests"] == [] and format_requests(report) == []
    assert request_numbers({"gen_ai.latency.e2e": "soon"}) is None


def test_parts_merge_exactly_and_pickle() -> None:
    """Parts merge in any order to the same numbers, and survive pickling (--jobs, --ray, the cache)."""
    rows = {i: (1.0, 0.1 * i, 0.2, 0.1, 0.7, 5.0, float(i % 2)) for i in range(4)}
    starts, ends = [0, 5, 10, 15], [4, 9, 14, 19]
    a = requests_part({0: rows[0], 1: rows[1]}, starts, ends)
    b = requests_part({2: rows[2], 3: rows[3]}, starts, ends)
    whole = requests_part(rows, starts, ends)
    assert a is not None and b is not None and whole is not None
    a.merge(b)
    assert a == whole and pickle.loads(pickle.dumps(whole)) == whole
    assert isinstance(whole, RequestsPart) and whole.count == 4 and requests_part({}, [], []) is None


def test_table_and_report_show_requests(tmp_path: Path) -> None:
    """The table has a requests section; the HTML report draws the requests figure."""
    run = tmp_path / "r1"
    _store(run)
    report = analyze(span_files(run))
    table = format_table(report)
    assert "requests (vLLM's llm_request spans)" in table
    section = table.split("requests (vLLM's llm_request spans)")[1].splitlines()
    line = next(x for x in section if x.strip().startswith("gen "))
    assert line.split()[1] == "20" and line.split()[-1] == "100.0"
    pytest.importorskip("plotly")
    from lens_rl.offline.show.report import build_report

    assert 'id="requests"' in build_report(span_files(run))


def test_implausible_values_are_skipped_and_counted(tmp_path: Path) -> None:
    """A request span with implausible numbers (1e300 s end to end and in queue, 2^63-1 output tokens, a
    negative decode time: a broken or hostile exporter's) is a request whose odd values are skipped and counted
    (``skipped_values``), never shown: its group's figures are its plausible request's, the table's row stays
    narrow; cold and through the refresh cache alike."""
    run = tmp_path / "r1"
    _store(run)
    odd = _request("odd", 0, 1.0, 0.1, 0.2, 10, "g0")
    odd["a"].update(
        {
            "gen_ai.latency.e2e": 1e300,
            "gen_ai.latency.time_in_queue": 1e300,
            "gen_ai.latency.time_in_model_decode": -1.0,
            "gen_ai.usage.completion_tokens": 2**63 - 1,
        }
    )
    write_process(run, "odd", 0, 4, [_request("fine", 0, 1.0, 0.1, 0.2, 10, "g0"), odd])
    report = analyze(span_files(run))
    row = next(r for r in report["requests"] if r["worker_group"] == "odd")
    assert row["requests"] == 2 and row["output_tokens"] == 10
    assert row["e2e_p95_s"] == 1.0 and row["queue_p95_s"] == 0.1 and row["skipped_values"] == 4
    assert row["decode_s"] == pytest.approx(0.8) and row["prefill_s"] == pytest.approx(0.1 + 0.1)
    assert all(r["skipped_values"] == 0 for r in report["requests"] if r["worker_group"] != "odd")
    section = format_table(report).split("requests (vLLM's llm_request spans)")[1].splitlines()
    assert max(len(line) for line in section) < 120
    assert any("4 value(s) of the requests skipped" in line for line in section)
    assert analyze(span_files(run), cache=cache_folder(run))["requests"] == report["requests"]
    assert analyze(span_files(run), cache=cache_folder(run))["requests"] == report["requests"]
