"""Stand-in frameworks for the registry's tests: a small timer library written to a temporary folder."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lens_rl.frameworks import _base, _registry
from lens_rl.frameworks._base import Framework, OpenPhases, StepUmbrella

TIMER_SOURCE = """
__version__ = "{version}"

class Timer:
    def __init__(self):
        self.log = []

    def start(self, name):
        self.log.append(("start", name))

    def stop(self, name):
        self.log.append(("stop", name))


class FastTimer(Timer):
    pass


def run_step(timer, step):
    timer.start("step")
    timer.start("gen")
    timer.stop("gen")
    timer.stop("step")
"""


@pytest.fixture
def standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A factory: a stand-in timer library ``fakelib_<n>`` (not yet imported) and its Framework, registered."""
    made: list[Framework] = []

    def make(version: str = "1.2.0", tested: str = ">=1.0,<2", weave: Any = None, extra: str = "") -> Framework:
        name = f"fakelib_{len(made)}_{abs(hash(tmp_path)) % 10_000}"
        (tmp_path / f"{name}.py").write_text(TIMER_SOURCE.format(version=version) + textwrap.dedent(extra))
        phases = OpenPhases()
        steps = StepUmbrella("step")

        def start(original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            timer, label = args[0], args[1]
            if label == "step":
                steps.begin()
            else:
                phases.start((id(timer), label), label)
            return original(*args, **kwargs)

        def stop(original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            result = original(*args, **kwargs)
            timer, label = args[0], args[1]
            if label == "step":
                steps.end()
            else:
                phases.stop((id(timer), label))
            return result

        def default_weave(module: Any, weaver: _base.Weaver) -> None:
            weaver.around(module.Timer, "start", start)
            weaver.around(module.Timer, "stop", stop)

        fw = Framework(name, f"no-such-dist-{name}", tested, {name: weave or default_weave}, unweave=steps.reset)
        _registry.register(fw)
        made.append(fw)
        return fw

    monkeypatch.syspath_prepend(str(tmp_path))
    yield make
    for fw in made:
        _registry.uninstrument(fw.name)
        _registry._LOADED.pop(fw.name, None)
        sys.modules.pop(fw.name, None)
