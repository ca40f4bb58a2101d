"""Attribute hygiene: coerce any user value to an OpenTelemetry value, bound it, redact secrets.

Every attribute lens_rl records passes through :func:`clean_attributes`, so a value of
any type (None, bytes, nested dicts, huge strings, numpy scalars) is coerced or
dropped, never raised on, and a key that looks secret never leaves the process.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

MAX_VALUE_CHARS = 4096
MAX_SEQUENCE_ITEMS = 128
REDACTED = "[REDACTED]"

_SECRET_KEY = re.compile(
    r"(api[_.-]?key|apikey|token|passw(or)?d|passwd|secret|authori[sz]ation|credential|"
    r"private[_.-]?key|cookie|session[_.-]?id|bearer|signature|access[_.-]?key)",
    re.IGNORECASE,
)


def is_secret_key(key: str) -> bool:
    """True when ``key`` looks like it names a credential (``api_key``, ``hf_token`` ...)."""
    return bool(_SECRET_KEY.search(key))


def _truncate(text: str) -> str:
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 3] + "..."


def clean_value(value: Any) -> Any:
    """An OTel-legal attribute value for ``value``, or None to drop it. Never raises."""
    try:
        if value is None:
            return None
        if isinstance(value, (bool, int, float)):
            if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
                return str(value)
            return value
        if isinstance(value, str):
            return _truncate(value)
        if isinstance(value, (bytes, bytearray, memoryview)):
            return _truncate(bytes(value[: MAX_VALUE_CHARS]).decode("utf-8", "replace"))
        item = getattr(value, "item", None)  # numpy / torch scalars
        if callable(item) and getattr(value, "ndim", 0) == 0 and getattr(value, "shape", ()) == ():
            return clean_value(item())
        if isinstance(value, (list, tuple)):
            items = [clean_value(v) for v in value[:MAX_SEQUENCE_ITEMS]]
            kinds = {type(v) for v in items}
            if None not in kinds and len(kinds) <= 1 and kinds <= {bool, int, float, str}:
                return items
            return _truncate(str([v for v in items]))
        if isinstance(value, Mapping):
            return _truncate(str({str(k): (REDACTED if is_secret_key(str(k)) else v) for k, v in value.items()}))
        return _truncate(repr(value))
    except Exception:
        return None


def clean_attributes(attributes: Mapping[str, Any] | None, prefix: str = "") -> dict[str, Any]:
    """``attributes`` with keys prefixed, values coerced, secret-looking keys redacted."""
    out: dict[str, Any] = {}
    if not attributes:
        return out
    for key, value in attributes.items():
        key = prefix + str(key)
        if is_secret_key(key):
            out[key] = REDACTED
            continue
        cleaned = clean_value(value)
        if cleaned is not None:
            out[key] = cleaned
    return out
