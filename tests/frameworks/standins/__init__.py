"""Stand-ins for frameworks that do not install on a CPU machine (NeMo-RL, SkyRL, OpenRLHF): small packages of
our own at the real module paths, with the real class, method and function names and signatures (read from
their sources at the versions ``docs/frameworks.md`` names), written here, not copied. Each loop is shaped like
the framework's trainer and returns the framework timer's own figures, which the tests hold lens_rl's against.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lens_rl.frameworks import _registry, uninstrument

HERE = Path(__file__).resolve().parent

#: How far apart the two clocks may be once a run: the scheduler preempting the process between lens_rl's
#: clock and the framework's (2 shared cores at load 4-8: a TRL step umbrella once read 0.10 s over its
#: callback clock, 0.1 ms on the other steps), never a phase that missed its end (that shows on every step)
PREEMPTION_S = 0.25


def agree(mine: float, theirs: float) -> bool:
    """lens_rl's seconds are the framework's own within 1 ms + 1 % (the SPEC's bar)."""
    return abs(mine - theirs) <= 0.001 + 0.01 * theirs


def assert_agree(pairs: list[tuple[str, float, float]]) -> None:
    """Every (what, lens_rl's seconds, the framework's seconds) agrees, but for at most one a run that is off by
    less than :data:`PREEMPTION_S`: a test that passes alone must pass on a loaded machine too."""
    off = [(what, mine - theirs) for what, mine, theirs in pairs if not agree(mine, theirs)]
    assert len(off) <= 1 and all(abs(delta) < PREEMPTION_S for _, delta in off), off


@contextmanager
def standin(framework: str, *packages: str) -> Iterator[None]:
    """The stand-in ``packages`` importable (not yet imported); afterwards lens_rl's weaving of ``framework``
    is undone and the packages forgotten."""
    sys.path.insert(0, str(HERE))
    try:
        yield
    finally:
        uninstrument(framework)
        sys.path.remove(str(HERE))
        for name in list(sys.modules):
            if name.split(".")[0] in (*packages, "_skyrl_timer"):
                del sys.modules[name]
        # wrapt runs a post-import hook once (it pops it): the stand-ins are imported afresh by the next test,
        # so the registry must register its hooks again
        _registry._HOOKED.difference_update({key for key in _registry._HOOKED if key[0] == framework})
