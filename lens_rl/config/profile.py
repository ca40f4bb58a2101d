"""The ``profile`` field of the ``telemetry:`` block (issue 47): which steps, groups and ranks the profiler windows
cover, the backend and the caps; read from a mapping or from the env form a worker is handed, every error naming
the key, the value and what is allowed.

Example::

    spec = as_profile("steps=3-4,groups=trainer,backend=torch", "profile")
    profile_to_env(spec)   # 'steps=3-4,groups=trainer,backend=torch,max_windows=2,max_bytes=536870912'
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from typing import Any

from lens_rl.config.values import as_positive_int, choice

__all__ = ["PROFILE_BACKENDS", "PROFILE_KEYS", "ProfileSpec", "as_profile", "profile_to_env"]

#: What ``profile.backend`` may name.
PROFILE_BACKENDS = ("torch", "cuda", "vllm")
PROFILE_KEYS = ("steps", "groups", "ranks", "backend", "max_windows", "max_bytes")


@dataclasses.dataclass(frozen=True)
class ProfileSpec:
    """The ``profile`` field, parsed: which steps (``(A, B)`` inclusive, or ``"auto"``), groups (names or globs;
    empty: all), ranks (empty: all), the backend and the caps."""

    steps: tuple[int, int] | str | None = None
    groups: tuple[str, ...] = ()
    ranks: tuple[int, ...] = ()
    backend: str = "torch"
    max_windows: int = 2
    max_bytes: int = 512 << 20

    def __repr__(self) -> str:
        return f"ProfileSpec({profile_to_env(self)})"


def _profile_steps(value: object, field: str) -> tuple[int, int] | str:
    text = str(value).strip().lower() if isinstance(value, (str, int)) and not isinstance(value, bool) else None
    if text == "auto":
        return "auto"
    first, sep, last = (text or "").partition("-")
    try:
        lo, hi = int(first), int(last) if sep else int(first)
    except ValueError:
        lo, hi = -1, -1
    if text is None or lo < 0 or hi < lo:
        raise ValueError(
            f"telemetry.{field}.steps: invalid value {value!r}; allowed: A-B (inclusive, 0 <= A <= B) or auto"
        )
    return lo, hi


def _profile_list(value: object, field: str, key: str) -> tuple[str, ...]:
    if isinstance(value, str):
        items = [item.strip() for item in re.split(r"[|,]", value)]
    elif isinstance(value, (list, tuple)) and all(
        isinstance(item, (str, int)) and not isinstance(item, bool) for item in value
    ):
        items = [str(item).strip() for item in value]
    elif key == "ranks" and isinstance(value, int) and not isinstance(value, bool):
        items = [str(value)]
    else:
        raise ValueError(f"telemetry.{field}.{key}: expected a list or names separated by '|', got {value!r}")
    return tuple(item for item in items if item and item.lower() != "all")


def as_profile(value: object, field: str) -> ProfileSpec | None:
    """``profile``: a mapping, or the env form ``steps=A-B,groups=G1|G2,ranks=0|3,backend=torch``; None or an
    empty value: unset. Each bad key or value is a ``ValueError`` naming it and what is allowed."""
    if value is None or isinstance(value, ProfileSpec):
        return value
    if isinstance(value, str):
        if not value.strip():
            return None
        pairs: dict[str, object] = {}
        for item in value.split(","):
            key, sep, text = item.partition("=")
            if not sep or not key.strip():
                raise ValueError(
                    f"telemetry.{field}: invalid item {item.strip()!r}; allowed: key=value pairs separated by commas, "
                    "e.g. steps=3-4,groups=trainer,ranks=0|3,backend=torch"
                )
            pairs[key.strip().lower()] = text.strip()
        value = pairs
    if not isinstance(value, dict):
        mapping = getattr(value, "__dict__", None)
        if not isinstance(mapping, dict):
            raise ValueError(f"telemetry.{field}: expected a mapping or 'steps=A-B,...', got {value!r}")
        value = {k: v for k, v in mapping.items() if not str(k).startswith("_")}
    out: dict[str, Any] = {}
    for key, raw in value.items():
        if key not in PROFILE_KEYS:
            close = difflib.get_close_matches(str(key), PROFILE_KEYS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"telemetry.{field}: unknown key {key!r}{hint}; allowed keys: {', '.join(PROFILE_KEYS)}")
        if raw is None:
            continue
        where = f"{field}.{key}"
        if key == "steps":
            out[key] = _profile_steps(raw, field)
        elif key == "groups":
            out[key] = _profile_list(raw, field, key)
        elif key == "ranks":
            ranks = _profile_list(raw, field, key)
            if not all(rank.isdigit() for rank in ranks):
                raise ValueError(f"telemetry.{where}: invalid value {raw!r}; allowed: ranks >= 0 separated by '|'")
            out[key] = tuple(int(rank) for rank in ranks)
        elif key == "backend":
            out[key] = choice(PROFILE_BACKENDS)(raw, where)
        elif key == "max_windows":
            out[key] = as_positive_int(raw, where, 1000, "windows")
        else:
            out[key] = as_positive_int(raw, where, 1 << 40, "bytes (1 TiB)")
    return ProfileSpec(**out)


def profile_to_env(spec: ProfileSpec) -> str:
    """``spec`` in the env form :func:`as_profile` reads back (what a worker is handed)."""
    steps = spec.steps if isinstance(spec.steps, str) else f"{spec.steps[0]}-{spec.steps[1]}" if spec.steps else None
    items = [f"steps={steps}"] if steps else []
    if spec.groups:
        items.append("groups=" + "|".join(spec.groups))
    if spec.ranks:
        items.append("ranks=" + "|".join(str(rank) for rank in spec.ranks))
    items += [f"backend={spec.backend}", f"max_windows={spec.max_windows}", f"max_bytes={spec.max_bytes}"]
    return ",".join(items)
