"""Which OpenTelemetry is installed, and the range lens_rl supports (what :mod:`lens_rl.export._sdk` adapts its
private names to; its tests name the versions they ran on)."""

from __future__ import annotations

from importlib import metadata

__all__ = ["DISTRIBUTIONS", "FLOOR", "installed_versions", "version_of"]

#: The oldest OpenTelemetry release lens_rl supports (api, sdk, exporters ``>=1.33,<2``).
FLOOR = (1, 33)

#: The OpenTelemetry distributions whose private names lens_rl.export._sdk reads (their versions: :func:`installed_versions`).
DISTRIBUTIONS = (
    "opentelemetry-api",
    "opentelemetry-sdk",
    "opentelemetry-exporter-otlp-proto-http",
    "opentelemetry-exporter-otlp-proto-common",
    "opentelemetry-proto",
    "opentelemetry-semantic-conventions",
)


def version_of(distribution: str = "opentelemetry-sdk") -> tuple[int, int]:
    """The installed release's (major, minor), or (0, 0) when it cannot be told."""
    try:
        major, minor = metadata.version(distribution).split(".")[:2]
        return int(major), int(minor)
    except (metadata.PackageNotFoundError, ValueError):
        return (0, 0)


def installed_versions() -> dict[str, str | None]:
    """The installed versions of the :data:`DISTRIBUTIONS` (None where one is missing)."""
    out: dict[str, str | None] = {}
    for name in DISTRIBUTIONS:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out
