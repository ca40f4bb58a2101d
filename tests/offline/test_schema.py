"""The report's types (``offline/rollup/schema.py``) describe the report the tool writes, field for field."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

from lens_rl.offline.rollup.schema import GoodputReport


def _mismatches(value: Any, hint: Any, where: str) -> list[str]:
    """Where ``value`` has a key its TypedDict does not name, or lacks one it requires (nested rows too)."""
    if typing.is_typeddict(hint):
        if not isinstance(value, dict):
            return [f"{where}: {type(value).__name__}, not a dict"]
        hints = typing.get_type_hints(hint)
        out = [f"{where}.{k}: not in {hint.__name__}" for k in sorted(set(value) - set(hints))]
        out += [f"{where}.{k}: missing" for k in sorted(hint.__required_keys__ - set(value))]
        for key in set(value) & set(hints):
            out += _mismatches(value[key], hints[key], f"{where}.{key}")
        return out
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) is list and isinstance(value, list):
        return [m for i, item in enumerate(value) for m in _mismatches(item, args[0], f"{where}[{i}]")]
    if len(args) == 1 and value is not None:  # X | None
        return _mismatches(value, args[0], where)
    return []


def test_a_report_has_exactly_the_fields_its_types_name(tmp_path: Path) -> None:
    """Every key of a real report (attempts, steps, phases, ranks, stragglers, the critical path) is one its
    TypedDict names, and every required one is there: mypy's checks of the readers hold for what is written."""
    from lens_rl.offline.run.analyze import analyze
    from lens_rl.store import span_files
    from tests.stores import synthesized_store

    report = analyze(span_files(synthesized_store(tmp_path, spans=1_000, files=3) / "run"), jobs=1)
    assert report["steps"] and report["phases"] and report["ranks"] and report["critical_path"]["steps"]
    assert _mismatches(report, GoodputReport, "report") == []
