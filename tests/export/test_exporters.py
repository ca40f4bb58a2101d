"""The choice of exporter: spans and metrics to one kind of destination, OTLP headers read once per handle."""

from __future__ import annotations

from pathlib import Path

import pytest

from lens_rl.config import TelemetryConfig
from lens_rl.export.exporters import make_exporters


@pytest.mark.parametrize(("exporter", "kinds"), [
    ("file", ("FileSpanExporter", "FileMetricExporter")),
    ("otlp", ("HTTPSpanExporter", "OTLPMetricExporter")),
    ("console", ("ConsoleSpanExporter", "ConsoleMetricExporter")),
    ("none", ("NoneType", "NoneType")),
])  # fmt: skip
def test_one_destination_for_both_signals(tmp_path: Path, exporter: str, kinds: tuple[str, str]) -> None:
    """Each exporter choice makes its span and metric exporter; a signal turned off has none."""
    config = TelemetryConfig(enabled=True, exporter=exporter, trace_dir=str(tmp_path), run_id="r")
    spans, metrics = make_exporters(config, {"rl.worker_group": "w", "nv.dl.rank": 0})
    assert (type(spans).__name__, type(metrics).__name__) == kinds
    off = TelemetryConfig(enabled=True, exporter=exporter, trace_dir=str(tmp_path), traces_enabled=False)
    assert make_exporters(off, {})[0] is None


def test_the_headers_file_is_read_once_for_both_signals(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """OTLP headers (a headers_file's content) are read once when a handle's exporters are made."""
    headers = tmp_path / "headers"
    headers.write_text("authorization=Bearer x\n")
    config = TelemetryConfig(enabled=True, exporter="otlp", headers_file=str(headers))
    reads = []
    real = TelemetryConfig.headers
    monkeypatch.setattr(TelemetryConfig, "headers", lambda self, environ=None: reads.append(1) or real(self, environ))
    spans, metrics = make_exporters(config, {})
    assert reads == [1] and spans is not None and metrics is not None
