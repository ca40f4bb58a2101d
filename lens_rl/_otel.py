"""OpenTelemetry's API modules, imported on first use and then read as plain attributes.

``import lens_rl`` must not import OpenTelemetry, and a ``from opentelemetry import x``
inside a hot function costs about a microsecond per call (the import machinery runs
each time). ``OTEL.context``, ``OTEL.trace``, ``OTEL.baggage`` import their module once,
then cost an attribute read.

Example::

    token = OTEL.context.attach(ctx)
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["OTEL"]


class _LazyModules:
    def __getattr__(self, name: str) -> Any:
        module = importlib.import_module(f"opentelemetry.{name}")
        setattr(self, name, module)  # later reads find it in the instance dict: no __getattr__
        return module


OTEL: Any = _LazyModules()
