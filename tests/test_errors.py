"""The one error boundary: telemetry's own faults logged once per kind, never raised into user code."""

from __future__ import annotations

import logging

import pytest

from lens_rl._errors import MissingExtraError, forget, handle_internal_errors, internal_error, require, warn_once


@pytest.mark.expects_internal_error
def test_a_fault_is_a_warning_once_per_kind_then_debug(caplog: pytest.LogCaptureFixture) -> None:
    """The first fault of a kind warns with its traceback; later ones of that kind log at debug."""
    caplog.set_level(logging.DEBUG, logger="lens_rl")
    forget()
    for _ in range(3):
        internal_error(RuntimeError("boom"), "kind-a")
    internal_error(RuntimeError("other"), "kind-b")
    levels = [(r.levelname, "kind-a" in r.getMessage()) for r in caplog.records]
    assert levels == [("WARNING", True), ("DEBUG", True), ("DEBUG", True), ("WARNING", False)]
    assert caplog.records[0].exc_info is not None
    assert warn_once("k", "once %s", 1) and not warn_once("k", "once %s", 2)


@pytest.mark.expects_internal_error
def test_the_boundary_swallows_exceptions_but_not_interrupts() -> None:
    """handle_internal_errors stops an Exception (logged) but lets KeyboardInterrupt and SystemExit through."""
    with handle_internal_errors("x"):
        raise ValueError("telemetry's own")
    with pytest.raises(KeyboardInterrupt), handle_internal_errors("x"):
        raise KeyboardInterrupt


def test_a_missing_extra_names_the_pip_command() -> None:
    """require() returns the module, or raises an ImportError naming what needs it and the extra to install."""
    assert require("json", "analysis").dumps([1]) == "[1]"
    with pytest.raises(
        MissingExtraError, match=r"^lens-rl report needs no_such_mod_x: pip install 'lens-rl\[report\]'$"
    ):
        require("no_such_mod_x", "report", "lens-rl report")
    assert issubclass(MissingExtraError, ImportError)
