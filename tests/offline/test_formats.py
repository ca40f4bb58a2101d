"""The views' number formats (``offline/show/formats.py``): one per kind of figure, ``-`` for no number."""

from __future__ import annotations

from lens_rl.offline.show.formats import age, percent, seconds, share, wall


def test_each_format_rounds_its_figure_and_shows_a_missing_one_as_a_dash() -> None:
    """Goodput to a tenth of a percent, prose shares whole, step times to the ms, walls to the hundredth,
    ages to the tenth; None, a bool or a string is '-'."""
    assert [percent(0.4567), share(0.456), seconds(1.23456), wall(12.3456), age(12.34)] == [
        "45.7%",
        "46%",
        "1.235s",
        "12.35s",
        "12.3s",
    ]
    assert {f(v) for f in (percent, share, seconds, wall, age) for v in (None, True, "1")} == {"-"}
