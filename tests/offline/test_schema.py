"""The report's types (``offline/rollup/schema.py``) describe the report the tool writes, field for field."""

from __future__ import annotations

from pathlib import Path

from lens_rl.offline.rollup.schema import GoodputReport, mismatches


def test_a_report_has_exactly_the_fields_its_types_name(tmp_path: Path) -> None:
    """Every key of a real report (attempts, steps, phases, ranks, stragglers, the critical path) is one its
    TypedDict names, every required one is there, and every value is of its declared type: mypy's checks of the
    readers hold for what is written, and a kept report passes the check the cache puts it through."""
    from lens_rl.offline.run.analyze import analyze
    from lens_rl.store import span_files
    from tests.stores import synthesized_store

    report = analyze(span_files(synthesized_store(tmp_path, spans=1_000, files=3) / "run"), jobs=1)
    assert report["steps"] and report["phases"] and report["ranks"] and report["critical_path"]["steps"]
    assert mismatches(report, GoodputReport, "report", most=50) == []
