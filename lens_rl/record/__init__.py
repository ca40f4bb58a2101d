"""The recording hot path: phases, worker start-up, bucket scopes, the phase engine, the span twins, the
generated wrappers and the optional C entry point. It imports only the vocabulary and the runtime: never
OpenTelemetry's SDK, the export side or the offline tools (the handle it records through is the runtime's)."""
