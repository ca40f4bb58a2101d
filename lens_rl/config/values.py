"""The values of the ``telemetry:`` block: one parser per kind, each naming the field, the value given and
what is allowed; the URL helpers that keep credentials out of logs and out of workers' environments.

Example::

    parse_bool(" Yes ", "enabled")            # True
    mask_url("http://user:pw@host:4318")      # 'http://[REDACTED]@host:4318'
"""

from __future__ import annotations

import difflib
import math
import os
import re
import urllib.parse
from collections.abc import Callable
from typing import Any

from lens_rl._attributes import mask_url, strip_userinfo

__all__ = [
    "Parser",
    "as_endpoint",
    "as_non_negative_int",
    "as_path",
    "as_positive_float",
    "as_positive_int",
    "as_rate",
    "as_sample_hz",
    "as_str",
    "choice",
    "env_text",
    "mask_url",
    "non_negative_int",
    "parse_bool",
    "parse_headers",
    "positive_int",
    "strip_userinfo",
]

#: A parser: ``(value, where) -> the field's value``; ``where`` names the field (and the variable it came from).
Parser = Callable[[object, str], Any]

#: The longest hang timeout taken (a week): past it a phase is never suspected.
MAX_HANG_TIMEOUT_S = 7 * 86_400.0

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})


def parse_bool(value: object, field: str = "value") -> bool:
    """Parse ``1 true yes on`` / ``0 false no off ""`` (case-insensitive, stripped).

    A real ``bool`` passes through; anything else raises ``ValueError`` naming
    ``field``, the value and what is allowed.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):  # YAML `enabled: 1`
        return bool(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
    raise ValueError(
        f"telemetry.{field}: invalid boolean {value!r}; allowed: true/false, 1/0, yes/no, on/off (case-insensitive)"
    )


def as_str(value: object, field: str, *, allow_empty: bool = False) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ValueError(f"telemetry.{field}: expected a string, got {value!r} ({type(value).__name__})")
    text = str(value).strip()
    if not text and not allow_empty:
        raise ValueError(f"telemetry.{field}: must not be empty, got {value!r}")
    if "\x00" in text:  # (no path, name or URL holds one: the OS would refuse it later, naming nothing)
        raise ValueError(f"telemetry.{field}: invalid value {value!r}; allowed: text without NUL bytes")
    return text


def as_positive_int(value: object, field: str, maximum: int | None = None, unit: str = "") -> int:
    """An integer > 0, at most ``maximum`` (an upper bound keeps a typo from killing a thread or the machine)."""
    if isinstance(value, bool):
        raise ValueError(f"telemetry.{field}: expected an integer > 0, got {value!r}")
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise ValueError(f"telemetry.{field}: expected an integer > 0, got {value!r}") from None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or value <= 0:
        raise ValueError(f"telemetry.{field}: expected an integer > 0, got {value!r}")
    if maximum is not None and value > maximum:
        raise ValueError(f"telemetry.{field}: {value!r} is out of range; allowed: 1 to {maximum} {unit}")
    return value


def as_non_negative_int(value: object, field: str, maximum: int | None = None, unit: str = "") -> int:
    """An integer >= 0 (0 turns the feature off), at most ``maximum``."""
    if isinstance(value, str) and value.strip() == "0" or value == 0 and not isinstance(value, bool):
        return 0
    try:
        return as_positive_int(value, field, maximum, unit)
    except ValueError:
        allowed = f"0 (off) to {maximum} {unit}" if maximum else "an integer >= 0 (0: off)"
        raise ValueError(f"telemetry.{field}: invalid value {value!r}; allowed: {allowed}") from None


def positive_int(maximum: int, unit: str) -> Parser:
    """The parser of an integer field > 0 bounded by ``maximum`` (``unit`` names it in the error)."""
    return lambda value, field: as_positive_int(value, field, maximum, unit)


def non_negative_int(maximum: int, unit: str) -> Parser:
    """The parser of an integer field >= 0 (0: off) bounded by ``maximum``."""
    return lambda value, field: as_non_negative_int(value, field, maximum, unit)


def _finite_number(value: object) -> float | None:
    """``value`` as a finite number (a number, or text that reads as one), else None (a bool is no number)."""
    number: object = value
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            return None
    if isinstance(number, bool) or not isinstance(number, (int, float)) or not math.isfinite(number):
        return None
    return number


def as_positive_float(value: object, field: str) -> float:
    """A number of seconds > 0, at most a week."""
    number = _finite_number(value)
    if number is None or not 0 < number <= MAX_HANG_TIMEOUT_S:
        raise ValueError(
            f"telemetry.{field}: invalid value {value!r}; allowed: seconds > 0, at most {MAX_HANG_TIMEOUT_S:.0f}"
        )
    return float(number)


def as_rate(value: object, field: str) -> float:
    if isinstance(value, bool):
        raise ValueError(f"telemetry.{field}: expected a number in [0, 1], got {value!r}")
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise ValueError(f"telemetry.{field}: expected a number in [0, 1], got {value!r}") from None
    if not isinstance(value, (int, float)) or math.isnan(value) or not 0.0 <= value <= 1.0:
        raise ValueError(f"telemetry.{field}: expected a number in [0, 1], got {value!r}")
    return float(value)


def choice(allowed: tuple[str, ...]) -> Callable[[object, str], str]:
    def parse(value: object, field: str) -> str:
        text = value.strip().lower() if isinstance(value, str) else None
        if text not in allowed:
            raise ValueError(f"telemetry.{field}: invalid value {value!r}; allowed: {', '.join(allowed)}")
        return text

    return parse


def name_list(allowed: tuple[str, ...]) -> Callable[[object, str], tuple[str, ...]]:
    """A parser of a list of names from ``allowed``, or a comma-separated string of them (``all``: every one),
    given back in ``allowed``'s order; an unknown name is a ``ValueError`` with a did-you-mean."""

    def parse(value: object, field: str) -> tuple[str, ...]:
        if isinstance(value, str):
            items = value.split(",")
        elif isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value):
            items = list(value)
        else:
            raise ValueError(
                f"telemetry.{field}: expected a list or a comma-separated string, got {value!r}; "
                f"allowed: {', '.join(allowed)}, all"
            )
        chosen: set[str] = set()
        for item in items:
            key = item.strip().lower().replace("-", "_")
            if key == "all":
                chosen.update(allowed)
            elif key in allowed:
                chosen.add(key)
            elif key:
                close = difflib.get_close_matches(key, allowed, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ValueError(
                    f"telemetry.{field}: unknown framework {item.strip()!r}{hint}; allowed: {', '.join(allowed)}, all"
                )
        return tuple(name for name in allowed if name in chosen)

    return parse


#: A host name or IPv4 address as a URL writes it (IPv6 literals are checked apart).
_HOST = re.compile(r"[\w.~%-]+")
_IPV6 = re.compile(r"[0-9A-Fa-f:.]+(%[A-Za-z0-9._~-]+)?")


def _well_formed_host(parts: urllib.parse.SplitResult) -> bool:
    host = parts.hostname or ""
    if "[" in parts.netloc.rpartition("@")[2]:
        return bool(_IPV6.fullmatch(host)) and ":" in host
    return bool(_HOST.fullmatch(host))


def as_endpoint(value: object, field: str) -> str:
    """An ``http://`` or ``https://`` URL with a well-formed host (and port, if given). Every error shows the
    value with its userinfo masked (:func:`mask_url`), with or without a scheme."""
    try:
        text = as_str(value, field).rstrip("/")
    except ValueError as exc:
        raise ValueError(mask_url(str(exc))) from None
    try:
        parts = urllib.parse.urlsplit(text)
        port = parts.port  # raises ValueError on a malformed port
    except ValueError:
        parts, port = None, None
    if (
        parts is None
        or parts.scheme not in ("http", "https")
        or not parts.hostname
        or (port is not None and port == 0)
        or any(ch.isspace() or not ch.isprintable() for ch in text)
        or not _well_formed_host(parts)
    ):
        raise ValueError(
            f"telemetry.{field}: invalid endpoint {mask_url(text)!r}; allowed: an http:// or https:// URL "
            "with a host, e.g. http://collector:4318"
        )
    return text


def as_path(value: object, field: str) -> str:
    text = as_str(value, field)
    if not os.path.isfile(text) or not os.access(text, os.R_OK):
        raise ValueError(f"telemetry.{field}: {text!r} is not a readable file; allowed: a path readable on every node")
    return text


def env_text(value: object) -> str:
    """A field's value as an environment variable carries it: ``true``/``false``, a list comma-joined, else ``str``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(item) for item in value)
    return str(value)


def parse_headers(text: str, where: str | None = None) -> dict[str, str]:
    """``key=value`` pairs separated by commas or new lines (as ``OTEL_EXPORTER_OTLP_HEADERS``).

    An entry that is not ``key=value`` (``x-team: KEY``, a common slip), or whose name or value (URL-decoded) is
    not printable ASCII (no HTTP or gRPC request could carry it), is left out; with ``where`` (the variable or
    file it came from) one warning names it by its position, never its text (it may hold a key).
    """
    out: dict[str, str] = {}
    bad: list[str] = []
    for position, item in enumerate(re.split(r"[,\n]", text), 1):
        if not item.strip() or item.lstrip().startswith("#"):
            continue
        key, sep, value = item.partition("=")
        name, text = urllib.parse.unquote(key.strip()).lower(), urllib.parse.unquote(value.strip())
        if sep and name and all(part.isascii() and part.isprintable() for part in (name, text)):
            out[name] = text
        else:
            bad.append(str(position))
    if bad and where:
        from lens_rl._errors import warn_once

        warn_once(
            f"bad-headers-{where}",
            "lens_rl: %s: entry %s is not name=value in printable ASCII and is left out (its text is not shown: it "
            "may hold a credential); allowed: name=value pairs separated by commas, values URL-encoded, "
            "e.g. x-api-key=KEY",
            where,
            ", ".join(bad),
        )
    return out


#: The highest GPU sampling rate taken: NVML's counters are averaged over 1/6 s or more, and faster polling
#: holds the driver's lock long enough to slow the job.
MAX_SAMPLE_HZ = 10.0


def as_sample_hz(value: object, field: str) -> float:
    """Samples per second: a number from 0 (off) to :data:`MAX_SAMPLE_HZ`."""
    number = _finite_number(value)
    if number is None or not 0 <= number <= MAX_SAMPLE_HZ:
        raise ValueError(
            f"telemetry.{field}: invalid value {value!r}; allowed: samples per second from 0 (off) to {MAX_SAMPLE_HZ:g}"
        )
    return float(number)
