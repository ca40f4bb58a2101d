"""The vLLM loopback receiver's bounds under clients that misbehave: 64 connections each announcing 32 MiB
and sending it slowly cost the process hosting it a bounded amount of memory and are all dropped after the
read timeout; a connection past the pool of connection threads is answered 503 before its body is read.

The receiver runs in a process of its own (its peak resident memory is that process's, from the kernel);
the clients are real sockets on loopback.
"""

from __future__ import annotations

import select
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from lens_rl.integrations.vllm_receiver import StoreReceiver
from tests.conftest import clean_env

HOST = """
    import sys, time
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2  # (imported before the baseline)
    from lens_rl.integrations.vllm_receiver import StoreReceiver

    def rss(field):
        for line in open("/proc/self/status"):
            if line.startswith(field):
                return int(line.split()[1]) * 1024

    spans = {"max_spans": int(sys.argv[3])} if len(sys.argv) > 3 else {}
    rx = StoreReceiver(sys.argv[1], "r1", {"rl.run_id": "r1"}, read_timeout_s=float(sys.argv[2]), **spans)
    print(rx.port, rss("VmRSS:"), flush=True)
    sys.stdin.readline()  # (the test is done)
    print(rss("VmHWM:"), rx.stats()["timed_out"], rx.stats()["refused"], rx.stats()["spans"], flush=True)
    rx.close()
"""

MIB = 1 << 20
CLIENTS, ANNOUNCED, SENT = 64, 32 * MIB, 8 * MIB


def _headers(length: int) -> bytes:
    return (
        f"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-protobuf\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


def _slow_client(port: int, deadline: float, out: dict[str, Any]) -> None:
    """Announce 32 MiB, send 8 MiB, then a byte every 0.2 s: what the receiver does with it (``"503"``, or
    ``"closed"`` and when), or ``"held"`` at ``deadline``."""
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    except OSError:
        out["end"] = "refused"
        return
    with sock:
        try:
            sock.sendall(_headers(ANNOUNCED))
            chunk = b"\0" * MIB
            for _ in range(SENT // MIB):
                sock.sendall(chunk)
            out["stalled_at"] = time.monotonic()
            while time.monotonic() < deadline:
                readable, _, _ = select.select([sock], [], [], 0.2)
                if readable:
                    data = sock.recv(4096)
                    out["end"] = "503" if data.startswith(b"HTTP/1.1 503") else "closed" if not data else "answer"
                    out["at"] = time.monotonic()
                    return
                sock.sendall(b"\0")
            out["end"] = "held"
        except OSError:  # (refused or reset by the receiver, or by the kernel before it was accepted)
            out["end"] = "closed"
            out["at"] = time.monotonic()


def _host(*args: str) -> subprocess.Popen[str]:
    """The receiver's host process (:data:`HOST`) with ``args``; it prints its port and baseline memory first."""
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(HOST), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=clean_env(),
    )


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_slow_clients_cost_bounded_memory_and_are_dropped_after_the_timeout(tmp_path: Path) -> None:
    """64 concurrent clients, each announcing a 32 MiB body, sending 8 MiB of it and then a trickle: the host's
    peak memory grows by at most what its 8 slots can hold of what was sent (no thread or body per client
    beyond its bounds), every client is answered 503 or dropped, and none is held past the read timeout (2 s
    here; 10 s by default) plus a generous margin."""
    host = _host(str(tmp_path), "2.0")
    try:
        assert host.stdout is not None and host.stdin is not None
        port, baseline = map(int, host.stdout.readline().split())
        deadline = time.monotonic() + 60
        outs: list[dict[str, Any]] = [{} for _ in range(CLIENTS)]
        threads = [threading.Thread(target=_slow_client, args=(port, deadline, out)) for out in outs]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        host.stdin.write("done\n")
        host.stdin.flush()
        peak, timed_out, refused, _ = map(int, host.stdout.readline().split())
    finally:
        host.wait(30)
    ends = [out.get("end") for out in outs]
    assert "held" not in ends and None not in ends, ends
    assert all(e in ("503", "closed", "refused") for e in ends), ends
    assert 1 <= timed_out <= 8 and refused >= 1, (timed_out, refused)  # (at most its 8 slots held a body)
    held = [out["at"] - out["stalled_at"] for out in outs if "stalled_at" in out and "at" in out]
    assert held and max(held) < 2.0 + 30, held  # (dropped after the timeout, not held for good)
    growth = peak - baseline
    assert growth < 8 * SENT + 96 * MIB, f"the receiver's host grew by {growth / MIB:.0f} MiB"


def test_a_connection_past_the_open_ones_gets_503_before_its_body_is_read(tmp_path: Path) -> None:
    """Every connection place taken (two idle clients): a third connection's request is answered 503 at
    once, its body never read; once the idle clients are closed (the read timeout), a request is served."""
    rx = StoreReceiver(str(tmp_path), "r1", {"rl.run_id": "r1"}, max_open=2, read_timeout_s=3.0)
    try:
        idle = [socket.create_connection(("127.0.0.1", rx.port), timeout=10) for _ in range(2)]
        end = time.monotonic() + 30
        while rx.stats()["connections"] < 2 and time.monotonic() < end:
            time.sleep(0.01)
        with socket.create_connection(("127.0.0.1", rx.port), timeout=10) as third:
            third.sendall(_headers(16 * MIB))  # (the body is never sent: the answer cannot wait for it)
            answer = third.recv(4096)
        assert answer.startswith(b"HTTP/1.1 503"), answer
        for sock in idle:  # the idle ones are closed by the read timeout
            assert sock.recv(1) == b""
            sock.close()
        body = b""  # (an empty export request: nothing to write)
        with socket.create_connection(("127.0.0.1", rx.port), timeout=10) as fourth:
            fourth.sendall(_headers(len(body)) + body)
            assert fourth.recv(4096).startswith(b"HTTP/1.1 200")
        stats = rx.stats()
        assert stats["refused"] == 1 and stats["timed_out"] == 0
    finally:
        assert rx.close(timeout_s=2.0) is True


def test_idle_keep_alive_connections_hold_no_request_thread(tmp_path: Path) -> None:
    """Two request threads, two connections kept open and idle: a third connection's request is served at
    once (an idle connection holds its socket, not a thread), and so is the next request of an idle one."""
    rx = StoreReceiver(str(tmp_path), "r1", {"rl.run_id": "r1"}, max_connections=2, read_timeout_s=30.0)
    try:
        idle = [socket.create_connection(("127.0.0.1", rx.port), timeout=10) for _ in range(2)]
        for sock in idle:  # (each served once, and kept alive)
            sock.sendall(_headers(0))
            assert sock.recv(4096).startswith(b"HTTP/1.1 200")
        with socket.create_connection(("127.0.0.1", rx.port), timeout=10) as third:
            third.sendall(_headers(0))
            assert third.recv(4096).startswith(b"HTTP/1.1 200")
        idle[0].sendall(_headers(0))
        assert idle[0].recv(4096).startswith(b"HTTP/1.1 200")
        assert rx.stats()["refused"] == 0
    finally:
        for sock in idle:
            sock.close()
        assert rx.close(timeout_s=2.0) is True


def test_a_request_followed_by_a_byte_of_the_next_is_closed_after_the_read_timeout(tmp_path: Path) -> None:
    """One request thread; a client sends a whole request and one byte of the next, then nothing: it is
    answered, then closed after the read timeout (the byte read ahead never leaves its socket without one),
    and another client is served meanwhile, its thread not held."""
    rx = StoreReceiver(str(tmp_path), "r1", {"rl.run_id": "r1"}, max_connections=1, read_timeout_s=0.5)
    try:
        with socket.create_connection(("127.0.0.1", rx.port), timeout=10) as quiet:
            quiet.sendall(_headers(0) + b"P")
            assert quiet.recv(4096).startswith(b"HTTP/1.1 200")
            time.sleep(1.5)  # (three read timeouts)
            with socket.create_connection(("127.0.0.1", rx.port), timeout=10) as other:
                other.sendall(_headers(0))
                assert other.recv(4096).startswith(b"HTTP/1.1 200")
            assert quiet.recv(4096) == b""  # closed by the receiver, not held
    finally:
        assert rx.close(timeout_s=2.0) is True


def _exporter(port: int, pid: int, batches: int, out: dict[int, list[int]]) -> None:
    """One exporting process as the OTLP/HTTP exporter is: a keep-alive ``requests.Session``, a batch every
    0.1 s, a 503 retried after a moment (as the exporter's backoff does: 8 body slots are fewer than the
    request threads, so a moment's crowd may be told to come back); the last status of each batch."""
    import requests

    with requests.Session() as session:
        for k in range(batches):
            body = _many_spans_body(5, pid=pid, first=k * 5)
            for _ in range(10):
                try:
                    status = session.post(
                        f"http://127.0.0.1:{port}/v1/traces",
                        data=body,
                        headers={"Content-Type": "application/x-protobuf"},
                        timeout=60,
                    ).status_code
                except requests.RequestException:
                    status = -1
                if status != 503:
                    break
                time.sleep(0.2)
            out[pid].append(status)
            time.sleep(0.1)


@pytest.mark.timeout(300)
def test_more_exporting_processes_than_request_threads_lose_nothing(tmp_path: Path) -> None:
    """24 processes exporting steadily over kept-alive connections (more than the 16 request threads): every
    batch of every one is answered 200 (a 503 for want of a body slot retried, as the exporter does; before,
    the connections past 16 held no thread and got 503 on every try), and every span is written, one file
    each."""
    rx = StoreReceiver(str(tmp_path), "r1", {"rl.run_id": "r1", "rl.worker_group": "gen", "nv.dl.rank": 0})
    out: dict[int, list[int]] = {1000 + n: [] for n in range(24)}
    try:
        threads = [threading.Thread(target=_exporter, args=(rx.port, pid, 12, out)) for pid in out]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(240)
        stats = rx.stats()
    finally:
        assert rx.close(timeout_s=5.0) is True
    assert {pid: codes for pid, codes in out.items() if codes != [200] * 12} == {}
    assert stats["spans"] == 24 * 12 * 5
    assert len(stats["files"]) == 24
    for path in stats["files"]:
        assert sum(1 for _ in open(path)) == 1 + 12 * 5


def _many_spans_body(n: int, nattr: int = 0, pid: int = 777, first: int = 0) -> bytes:
    """A valid OTLP request of ``n`` small spans of one process (``nattr`` string attributes each; span ids
    from ``first + 1``)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest()
    rs = request.resource_spans.add()
    kv = rs.resource.attributes.add()
    kv.key, kv.value.string_value = "vllm.process_id", str(pid)
    ss = rs.scope_spans.add()
    ss.scope.name = "vllm.v1.engine.core"
    now = time.time_ns()
    for i in range(n):
        span = ss.spans.add()
        span.trace_id, span.span_id, span.name = b"\1" * 16, (first + i + 1).to_bytes(8, "big"), "s"
        span.start_time_unix_nano, span.end_time_unix_nano = now, now + 1
        for j in range(nattr):
            attr = span.attributes.add()
            attr.key, attr.value.string_value = f"k{j}", "v" * 24
    return request.SerializeToString()


def _post(port: int, body: bytes) -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/traces", data=body, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_big_valid_body_costs_memory_bounded_by_its_size(tmp_path: Path) -> None:
    """One valid body of 300,000 small spans (14 MiB; the span cap raised for it): every span is written, and
    the host grows by at most a few times the body (it is decoded and written a chunk of spans at a time, not
    all at once, which cost ~25 times the body)."""
    body = _many_spans_body(300_000)
    host = _host(str(tmp_path), "30", str(1 << 20))
    try:
        assert host.stdout is not None and host.stdin is not None
        port, baseline = map(int, host.stdout.readline().split())
        assert _post(port, body) == 200
        host.stdin.write("done\n")
        host.stdin.flush()
        peak, _, refused, spans = map(int, host.stdout.readline().split())
    finally:
        host.wait(30)
    assert spans == 300_000 and refused == 0
    growth = peak - baseline
    assert growth < 4 * len(body) + 48 * MIB, f"{len(body) / MIB:.0f} MiB body: the host grew {growth / MIB:.0f} MiB"


def test_a_body_of_more_spans_than_the_cap_is_refused_whole(tmp_path: Path) -> None:
    """A body over ``max_spans`` spans (65,536 by default; OpenTelemetry's batches are 512) is answered 413
    and nothing of it is written; one at the cap is written whole."""
    rx = StoreReceiver(str(tmp_path), "r1", {"rl.run_id": "r1"}, max_spans=1000)
    try:
        assert _post(rx.port, _many_spans_body(1001, nattr=1)) == 413
        assert rx.stats()["spans"] == 0 and rx.stats()["files"] == [] and rx.stats()["refused"] == 1
        assert _post(rx.port, _many_spans_body(1000, nattr=1)) == 200
        assert rx.stats()["spans"] == 1000
    finally:
        assert rx.close(timeout_s=2.0) is True
    (path,) = rx.stats()["files"]
    assert sum(1 for _ in open(path)) == 1001  # (its header, then every span)


def test_a_body_of_millions_of_empty_parts_is_refused_after_a_bounded_walk(tmp_path: Path) -> None:
    """A body of 2 M empty resource spans (4 MiB, no span) and one of 2 M unknown fields are refused (400)
    once their walk passes a few fields a span of the cap, nothing written (each was walked whole in Python: 14 s
    of CPU for 32 MiB); a body at the cap whose every span has a resource and a scope of its own, each with a
    schema URL, is written whole."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    one = ExportTraceServiceRequest.FromString(_many_spans_body(1, nattr=1))
    alone = ExportTraceServiceRequest()
    for i in range(1000):
        rs = alone.resource_spans.add()
        rs.CopyFrom(one.resource_spans[0])
        rs.scope_spans[0].spans[0].span_id = (i + 1).to_bytes(8, "big")
        rs.schema_url = rs.scope_spans[0].schema_url = "https://opentelemetry.io/schemas/1.24.0"
    rx = StoreReceiver(str(tmp_path), "r1", {"rl.run_id": "r1"}, max_spans=1000)
    try:
        for hostile in (b"\x0a\x00" * 2_000_000, b"\x7a\x00" * 2_000_000):  # (field 1, and unknown field 15)
            assert _post(rx.port, hostile) == 400
        assert rx.stats()["spans"] == 0 and rx.stats()["files"] == [] and rx.stats()["refused"] == 2
        assert _post(rx.port, alone.SerializeToString()) == 200
        assert rx.stats()["spans"] == 1000
    finally:
        assert rx.close(timeout_s=2.0) is True
