"""The number formats of every view for people (the goodput table, the HTML report, status, watch): one
function per format, so a figure reads the same wherever it is shown. A value that is not a number (None: no
wall to divide by, no heartbeat yet) shows as ``-``. A store's text (a group, a host, a phase's name) shows
through :func:`text`: a control character in it is escaped, so no store can clear a terminal or forge a row."""

from __future__ import annotations

__all__ = ["age", "percent", "seconds", "share", "text", "wall"]


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def percent(value: object) -> str:
    """A ratio as a percentage to a tenth: goodput, a phase's share of the wall (``0.4567`` -> ``45.7%``)."""
    return f"{value * 100:.1f}%" if _number(value) else "-"  # type: ignore[operator]


def share(value: object) -> str:
    """A ratio as a whole percentage, for prose: how much an unbucketed phase covers (``0.456`` -> ``46%``)."""
    return f"{value * 100:.0f}%" if _number(value) else "-"  # type: ignore[operator]


def seconds(value: object) -> str:
    """A duration to the millisecond: step times (``1.23456`` -> ``1.235s``)."""
    return f"{value:.3f}s" if _number(value) else "-"


def wall(value: object) -> str:
    """A wall-clock span to the hundredth: a step's wall, a lifetime, a phase open so far
    (``12.3456`` -> ``12.35s``)."""
    return f"{value:.2f}s" if _number(value) else "-"


def age(value: object) -> str:
    """A time to the tenth: a heartbeat's age, an open phase against its usual p95 and max (``12.34`` -> ``12.3s``)."""
    return f"{value:.1f}s" if _number(value) else "-"


def text(value: object) -> str:
    """A store's value as one line of plain text: ``-`` for None; every character that is not printable (an
    escape, a newline, a bell, a bidirectional override, the C1 controls) written as its Python escape
    (``\\x1b``, ``\\n``), so a table shows what the store holds and a terminal acts on none of it."""
    if value is None:
        return "-"
    shown = value if isinstance(value, str) else str(value)
    if shown.isprintable():  # (the usual case: nothing to escape)
        return shown
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in shown)
