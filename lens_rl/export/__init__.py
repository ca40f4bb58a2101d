"""The SDK side: the handle, providers, sampling, live metrics, the span pipeline, bounded calls and the
exporters (OTLP, the file store's writer). Every private OpenTelemetry name lives in :mod:`._sdk`."""
