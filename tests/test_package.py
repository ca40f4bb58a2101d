"""The package surface: light import, __all__ in step with exports, typed marker."""

from __future__ import annotations

from pathlib import Path

import lens_rl
from tests.conftest import run_python

ROOT = Path(__file__).resolve().parents[1]


def test_import_loads_no_opentelemetry_ray_or_aiohttp() -> None:
    """`import lens_rl` loads none of the heavy dependencies (nor the reading side's parsers) and starts no
    thread."""
    out = run_python(
        """
        import sys, threading, lens_rl
        heavy = sorted({m.split(".")[0] for m in sys.modules} & {"opentelemetry", "ray", "aiohttp", "grpc", "msgspec", "orjson", "requests"})
        print(heavy, threading.active_count())
        """
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[] 1"


def test_all_matches_public_exports() -> None:
    """__all__ is sorted, every name in it resolves, and no public re-export is missing from it."""
    assert lens_rl.__all__ == sorted(lens_rl.__all__)
    for name in lens_rl.__all__:
        assert getattr(lens_rl, name) is not None
    public = {n for n in vars(lens_rl) if not n.startswith("_") and n not in {"annotations", "TYPE_CHECKING", "Any"}}
    modules = {n for n in public if type(getattr(lens_rl, n)).__name__ == "module"}
    assert public - modules <= set(lens_rl.__all__)


def test_package_is_typed() -> None:
    """py.typed ships with the package."""
    assert (Path(lens_rl.__file__).parent / "py.typed").exists()


def test_the_version_is_one_constant_everywhere() -> None:
    """lens_rl.__version__ is _version's (which imports nothing), and the command says the same."""
    from lens_rl._version import __version__

    assert lens_rl.__version__ == __version__
    out = run_python(
        "import runpy, sys; sys.argv = ['lens-rl', '--version']; runpy.run_module('lens_rl', run_name='__main__')"
    )
    assert out.stdout.strip() == f"lens-rl {__version__}"
