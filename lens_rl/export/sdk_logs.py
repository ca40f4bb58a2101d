"""The OpenTelemetry SDK's own log lines, kept in proportion: its attribute-limit warnings once per message."""

from __future__ import annotations

import logging

__all__ = ["quiet_sdk_limit_logs"]


class _OncePerMessage(logging.Filter):
    """Lets the first record of each message template through, then drops repeats (the SDK's span-limit
    warnings would otherwise log once per dropped attribute: 9,900 lines for 10,000 attributes)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        key = str(record.msg)
        if key in self.seen:
            return False
        self.seen.add(key)
        return True


_ONCE = _OncePerMessage()


def quiet_sdk_limit_logs() -> None:
    """Once per process: the SDK's attribute-limit loggers log each message once."""
    for name in ("opentelemetry.attributes", "opentelemetry.sdk.trace"):
        logger = logging.getLogger(name)
        if _ONCE not in logger.filters:
            logger.addFilter(_ONCE)
