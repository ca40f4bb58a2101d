"""The offline tools' face (``lens_rl.offline``): the names the CLI and the demo import, loaded on first use."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_every_public_name_of_the_face_resolves() -> None:
    """Each name in lens_rl.offline.__all__ is the function or constant of its sub-floor; an unknown one is an
    AttributeError."""
    import lens_rl.offline as offline
    from lens_rl.offline.run.analyze import analyze

    assert offline.analyze is analyze
    assert all(callable(getattr(offline, name)) or name == "FORMATS" for name in offline.__all__)
    with pytest.raises(AttributeError):
        _ = offline.no_such_tool


def test_status_through_the_face_does_not_load_the_goodput_machinery() -> None:
    """``from lens_rl.offline import run_status`` (lens-rl status) imports neither numpy nor the goodput passes."""
    code = (
        "import sys; from lens_rl.offline import run_status; "
        "print(sorted(m for m in ('numpy', 'lens_rl.offline.run.analyze') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
