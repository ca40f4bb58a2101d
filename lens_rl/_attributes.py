"""Attribute hygiene: coerce any user value to an OpenTelemetry value, bound it, redact secrets.

Every attribute lens_rl exports passes through :func:`clean_attributes` (its own
phases, ``span.set_attribute``, and third-party spans through lens_rl's providers),
so a value of any type is coerced or dropped, never raised on, in bounded time.

Redaction (SPEC, Secrets):

* A key is split into segments (``.``, ``_``, ``-``, spaces, camelCase). A key with a
  secret segment (``password`` / ``pass`` + ``word``, ``passphrase`` / ``pass`` +
  ``phrase``, ``secret``, ``apikey`` / ``api`` + ``key``, ``auth``, ``oauth``, ``jwt``,
  ``dsn`` ...) has its value redacted whatever it is, numbers included.
* ``token`` alone is different: token *counts* are the central numbers of an RL job.
  ``tokens`` is not secret at all (``rl.num_tokens``); under a key whose only secret
  segment is ``token``, numbers and booleans are kept (``pad_token_id=0``) and
  strings redacted (``hf_token``).
* Containers (mappings, lists of pairs, dataclasses, namespaces) are redacted at
  every depth; whatever the key, a URL's userinfo password and the credential after
  ``Bearer`` / ``Basic`` are masked.
* Coercion is bounded: at most :data:`MAX_DEPTH` levels and :data:`MAX_NODES` values
  per attribute, cycles cut, strings at most :data:`MAX_VALUE_CHARS` characters, lone
  surrogates repaired (a span that cannot be encoded would block its whole batch).

This module imports nothing of lens_rl but the error boundary.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import re
from collections.abc import Mapping
from typing import Any

from lens_rl._errors import internal_error

MAX_VALUE_CHARS = 4096
MAX_SEQUENCE_ITEMS = 128
#: Nesting levels and values rendered per attribute value; past them, "..." stands in.
MAX_DEPTH = 6
MAX_NODES = 512
REDACTED = "[REDACTED]"
#: a URL's userinfo (``user:password@``, up to the authority's last ``@``): never said, never sent to workers
_USERINFO = re.compile(r"(://)[^/?#\s]*@")
#: userinfo with a password where no scheme is written (``user:pw@host:4318``), at the start of a word or quoted
_BARE_USERINFO = re.compile(r"(?<![^\s'\"(<\[=,;])[^\s/?#@:'\"]+:[^\s/?#'\"]*@")


def mask_url(text: str) -> str:
    """``text`` (a URL, or a message holding some) with each URL's userinfo masked, for logs and errors: after a
    scheme (``http://user:pw@host``) or without one (``user:pw@host:4318``, as gRPC targets and typos are written).
    Linear in the text: the scheme-less form is looked for word by word, only in words holding an ``@``; a word
    longer than :data:`_WORD_MAX` holding one is masked up to its last ``@`` unread."""
    text = _USERINFO.sub(rf"\1{REDACTED}@", text)
    return _WORD.sub(_masked_word, text) if "@" in text else text


#: the longest word the scheme-less pattern is run over (its backtracking grows with the word's length squared)
_WORD_MAX = 4096
_WORD = re.compile(r"\S+")


def _masked_word(match: re.Match[str]) -> str:
    word = match.group()
    if "@" not in word:
        return word
    if len(word) > _WORD_MAX:
        return REDACTED + word[word.rindex("@") :]
    return _BARE_USERINFO.sub(f"{REDACTED}@", word)


def strip_userinfo(url: str) -> str:
    """``url`` without its userinfo: what may travel to workers (credentials never do)."""
    return _USERINFO.sub(r"\1", url)


class _HeaderEntryHidden(logging.Filter):
    """OpenTelemetry's "Header format invalid" warning without the entry (its value may be a key)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and record.msg.startswith("Header format invalid") and record.args:
            record.msg = record.msg.replace("%s", "(the entry is not shown: it may hold a credential)")
            record.args = ()
        return True


_HIDE_HEADER_ENTRIES = _HeaderEntryHidden()


def hide_header_entries() -> None:
    """Keep OpenTelemetry's header parser (which some releases' exporters run on ``OTEL_EXPORTER_OTLP_HEADERS``
    whatever headers they are given) from logging a badly formed entry's text; idempotent."""
    logging.getLogger("opentelemetry.util.re").addFilter(_HIDE_HEADER_ENTRIES)


#: Keys lens_rl sets alone (SPEC, Attribute naming): a user's value for one is dropped wherever it is given.
LENS_RL_KEYS = ("rl.bucket",)
#: What a phase's span is counted by, decided when it opens (its bucket; its step, given by ``step=``): live
#: accounting has used them, so a value set on the open span (``set_attribute``) is dropped, or the offline read
#: of the same span would disagree with it.
OPENING_KEYS = (*LENS_RL_KEYS, "rl.step")

_SEGMENT_SPLIT = re.compile(r"[^A-Za-z0-9]+")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_SECRET_SEGMENTS = frozenset({
    "password", "passwords", "passwd", "pwd", "passphrase", "secret", "secrets", "apikey", "apikeys",
    "passphrases", "auth", "oauth", "authorization", "credential", "credentials", "cookie", "cookies", "jwt",
    "bearer",
    "hmac", "dsn", "signature", "privatekey", "sshkey", "accesskey", "secretkey",
})  # fmt: skip
_SECRET_PAIRS = frozenset({
    ("api", "key"), ("private", "key"), ("ssh", "key"), ("access", "key"), ("secret", "key"),
    ("pass", "word"), ("pass", "words"), ("pass", "phrase"), ("pass", "phrases"),
})  # fmt: skip
_TOKEN_SEGMENTS = frozenset({"token"})

# Credentials inside any string: a URL's userinfo password, a Bearer / Basic credential.
_CREDENTIAL = re.compile(r"(?i)\b(bearer|basic)(\s+)[^\s,;\"']+|(://[^/\s:@]*:)[^\s/?#]*@")

# What a key is, cached (keys repeat endlessly; the cache is bounded).
_KEY_CACHE: dict[str, int] = {}
_KEY_CACHE_MAX = 8192
_PLAIN, _TOKEN_ONLY, _SECRET = 0, 1, 2


def _segments(key: str) -> list[str]:
    out: list[str] = []
    for part in _SEGMENT_SPLIT.split(key):
        if part:
            out.extend(p.lower() for p in _CAMEL.findall(part))
    return out


def _classify(key: str) -> int:
    kind = _KEY_CACHE.get(key)
    if kind is not None:
        return kind
    segs = _segments(key)
    kind = _PLAIN
    if any(s in _SECRET_SEGMENTS for s in segs) or any(
        pair in _SECRET_PAIRS for pair in zip(segs, segs[1:], strict=False)
    ):
        kind = _SECRET
    elif any(s in _TOKEN_SEGMENTS for s in segs):
        kind = _TOKEN_ONLY
    if len(_KEY_CACHE) < _KEY_CACHE_MAX:
        _KEY_CACHE[key] = kind
    return kind


def redacts(key: str, value: Any) -> bool:
    """True when ``value`` under ``key`` must not be exported (the SPEC's rule, token counts kept)."""
    kind = _classify(key)
    if kind == _SECRET:
        return True
    if kind == _TOKEN_ONLY:
        return not isinstance(value, (bool, int, float))
    return False


def _mask(match: re.Match[str]) -> str:
    if match.group(1):
        return f"{match.group(1)}{match.group(2)}{REDACTED}"
    return f"{match.group(3)}{REDACTED}@"


def clean_text(value: Any) -> str:
    """``value`` as a bounded, encodable string with embedded credentials masked. Never raises."""
    try:
        text = value if isinstance(value, str) else str(value)
    except Exception as exc:
        internal_error(exc, "unprintable-attribute")
        text = f"<unprintable {type(value).__name__}>"
    if len(text) > MAX_VALUE_CHARS:
        text = text[: MAX_VALUE_CHARS - 3] + "..."
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates: repaired here, or the whole batch fails to encode
            text = text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    if ("@" in text or " " in text or "\t" in text) and _CREDENTIAL.search(text):
        text = _CREDENTIAL.sub(_mask, text)
    return text


class _Budget:
    __slots__ = ("nodes", "seen")

    def __init__(self) -> None:
        self.nodes = 0
        self.seen: set[int] = set()


def _items(value: Any) -> list[tuple[str, Any]] | None:
    """(key, value) pairs of a mapping-like value, else None."""
    if isinstance(value, Mapping):
        return [(str(k), v) for k, v in itertools.islice(value.items(), MAX_SEQUENCE_ITEMS)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [(f.name, getattr(value, f.name, None)) for f in dataclasses.fields(value)[:MAX_SEQUENCE_ITEMS]]
    if (
        isinstance(value, (list, tuple))
        and value
        and all(
            isinstance(p, (list, tuple)) and len(p) == 2 and isinstance(p[0], str) for p in value[:MAX_SEQUENCE_ITEMS]
        )
    ):
        return [(p[0], p[1]) for p in value[:MAX_SEQUENCE_ITEMS]]
    namespace = getattr(value, "__dict__", None)
    if type(value).__name__ == "SimpleNamespace" or (
        isinstance(namespace, dict) and type(value).__module__ in ("argparse", "types")
    ):
        return [(str(k), v) for k, v in itertools.islice(namespace.items(), MAX_SEQUENCE_ITEMS)]  # type: ignore[union-attr]
    return None


def _render(value: Any, depth: int, budget: _Budget) -> Any:
    """A JSON-like plain structure of ``value`` with secrets redacted, bounded in depth and size."""
    budget.nodes += 1
    if budget.nodes > MAX_NODES or depth > MAX_DEPTH:
        return "..."
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return clean_text(bytes(value[:MAX_VALUE_CHARS]).decode("utf-8", "replace"))
    if id(value) in budget.seen:
        return "<cycle>"
    budget.seen.add(id(value))
    try:
        pairs = _items(value)
        if pairs is not None:
            return {k: (REDACTED if redacts(k, v) else _render(v, depth + 1, budget)) for k, v in pairs}
        if isinstance(value, (list, tuple, set, frozenset)):
            return [_render(v, depth + 1, budget) for v in itertools.islice(value, MAX_SEQUENCE_ITEMS)]
        return clean_text(repr(value))
    finally:
        budget.seen.discard(id(value))


def clean_value(value: Any) -> Any:
    """An OTel-legal attribute value for ``value``, or None to drop it. Never raises; bounded time."""
    try:
        if value is None:
            return None
        if isinstance(value, (bool, int, float)):
            if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
                return str(value)
            return value
        if isinstance(value, str):
            return clean_text(value)
        if isinstance(value, (bytes, bytearray, memoryview)):
            return clean_text(bytes(value[:MAX_VALUE_CHARS]).decode("utf-8", "replace"))
        item = getattr(value, "item", None)  # numpy / torch scalars
        if callable(item) and getattr(value, "ndim", 0) == 0 and getattr(value, "shape", ()) == ():
            return clean_value(item())
        if isinstance(value, (list, tuple)) and _items(value) is None:
            items = [
                clean_value(v) if isinstance(v, (bool, int, float, str)) else v for v in value[:MAX_SEQUENCE_ITEMS]
            ]
            kinds = {type(v) for v in items}
            if len(kinds) == 1 and kinds <= {bool, int, float, str}:
                return items
        return clean_text(_dump(_render(value, 0, _Budget())))
    except Exception as exc:
        internal_error(exc, "unprintable-attribute")
        return None


def _dump(plain: Any) -> str:
    import json

    return json.dumps(plain, ensure_ascii=False, default=str, allow_nan=False) if not _has_nan(plain) else str(plain)


def _has_nan(plain: Any) -> bool:
    if isinstance(plain, float):
        return plain != plain or plain in (float("inf"), float("-inf"))
    if isinstance(plain, dict):
        return any(_has_nan(v) for v in plain.values())
    if isinstance(plain, list):
        return any(_has_nan(v) for v in plain)
    return False


def scrub_attributes(attributes: Any) -> Any:
    """Already-recorded attributes (a third-party span's) with the SPEC's rule applied.

    Returns the same object when nothing needs a change (cheap: cached key checks and
    string scans), else a new dict: secrets redacted, strings repaired and masked.
    """
    if not attributes:
        return attributes
    out: dict[str, Any] | None = None
    for key, value in attributes.items():
        if redacts(key, value):
            new: Any = REDACTED
        elif isinstance(value, str):
            new = clean_text(value)
        elif isinstance(value, tuple) and value and isinstance(value[0], str):
            cleaned = tuple(clean_text(v) if isinstance(v, str) else v for v in value)
            new = value if all(a is b for a, b in zip(cleaned, value, strict=False)) else cleaned
        else:
            new = value
        if new is not value and out is None:
            out = dict(attributes)
        if out is not None:
            out[key] = new
    return attributes if out is None else out


def clean_attributes(attributes: Mapping[str, Any] | None, prefix: str = "") -> dict[str, Any]:
    """``attributes`` with keys prefixed, values coerced, secrets redacted (the SPEC's rule)."""
    out: dict[str, Any] = {}
    if not attributes:
        return out
    try:
        pairs = list(attributes.items())
    except Exception as exc:
        internal_error(exc, "unprintable-attribute")
        return out
    for key, value in pairs:
        key = clean_text(prefix + (key if isinstance(key, str) else str(key)))
        if redacts(key, value):
            out[key] = REDACTED
            continue
        cleaned = clean_value(value)
        if cleaned is not None:
            out[key] = cleaned
    return out


def without(attributes: dict[str, Any], keys: tuple[str, ...] = LENS_RL_KEYS) -> dict[str, Any]:
    """``attributes`` (cleaned, so keys are plain strings) with ``keys`` removed, in place."""
    for key in keys:
        attributes.pop(key, None)
    return attributes


def safe_str(exc: BaseException) -> str:
    """``str(exc)`` cleaned; an exception whose ``__str__`` raises is named by its type."""
    try:
        return clean_text(str(exc))
    except Exception as err:
        internal_error(err, "unprintable-exception")
        return f"<{type(exc).__name__}: unprintable>"


def exception_event(
    exc: BaseException, attributes: Mapping[str, Any] | None = None, escaped: bool | None = None
) -> dict[str, Any]:
    """The attributes of a span's ``exception`` event (OpenTelemetry's conventions), for every kind of span.

    Type, message and stacktrace, each cleaned, so a hostile ``__str__`` or traceback cannot break
    the event; ``exception.escaped`` when the caller knows it; then ``attributes`` (they win).
    """
    attrs: dict[str, Any] = {"exception.type": type(exc).__qualname__, "exception.message": safe_str(exc)}
    try:
        import traceback

        attrs["exception.stacktrace"] = clean_text("".join(traceback.format_exception(exc)))
    except Exception as err:
        internal_error(err, "unprintable-exception")
    if escaped is not None:
        attrs["exception.escaped"] = str(escaped)
    if attributes:
        attrs.update(attributes)
    return attrs
