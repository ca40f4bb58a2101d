"""The open-but-not-current step umbrellas (lens_rl.record.umbrellas): kept per thread, forgotten once closed."""

from __future__ import annotations

import threading

import lens_rl
from lens_rl.frameworks._base import StepUmbrella
from lens_rl.record import umbrellas
from lens_rl.testing import recording


def test_an_umbrella_is_kept_for_its_thread_only_and_forgotten_when_it_ends() -> None:
    """While a step is open its thread's phases get its context, another thread's get none; once it ends the
    registry is empty again (so a phase after it costs nothing and is never parented under it)."""
    steps = StepUmbrella("step", loose=True)
    seen: list[object] = []
    with recording():
        steps.begin(3)
        assert umbrellas.umbrella_parent() is not None
        worker = threading.Thread(target=lambda: seen.append(umbrellas.umbrella_parent()))
        worker.start()
        worker.join()
        steps.end()
    assert seen == [None] and umbrellas.UMBRELLAS == {} and umbrellas.umbrella_parent() is None


def test_a_phase_made_current_inside_the_umbrella_wins() -> None:
    """Inside a with-block opened after the umbrella, the block is the parent, not the umbrella."""
    steps = StepUmbrella("step", loose=True)
    with recording() as rec:
        steps.begin(1)
        with lens_rl.traced_phase("rollout", bucket="productive"):
            assert umbrellas.umbrella_parent() is None
            with lens_rl.traced_phase("reward", bucket="productive"):
                pass
        steps.end()
    rollout, reward = rec.find_all("rollout")[0], rec.find_all("reward")[0]
    assert reward.parent.span_id == rollout.context.span_id
