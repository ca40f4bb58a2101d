"""What a weave hands lens_rl of a framework's async path (``lens_rl.frameworks._versions``): the consumption a
trainer took reaches the next training phase only, as plain numbers; a shape that is not as read keeps nothing
and never raises into the framework."""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction

import pytest

import lens_rl
from lens_rl._runtime import RUNTIME
from lens_rl.frameworks import _versions


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    _versions.discard()
    yield
    _versions.discard()
    lens_rl.set_weight_version(None)


class _NumpyLikeInt:
    """An integer that is not an int (what numpy's int64 in a veRL object array is to Python)."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __int__(self) -> int:
        return self.value

    def __eq__(self, other: object) -> bool:
        return other == self.value

    __hash__ = None  # type: ignore[assignment]


def test_a_consumption_goes_to_the_next_training_phase_once() -> None:
    """Kept versions and tokens are taken by the first training-family phase (as plain ints), not by a
    generation or logprob phase, and only once."""
    _versions.consumed(_NumpyLikeInt(5), [_NumpyLikeInt(4), 3], [10, 2.5], "test", bound=2)
    assert _versions.take("gen") == {} and _versions.take("old_log_prob") == {}
    assert _versions.take("update_actor") == {
        "policy_version": 5,
        "trajectory_versions": [4, 3],
        "trajectory_tokens": [10, 2.5],
        "max_staleness": 2,
    }
    assert _versions.take("update_actor") == {}


def test_shapes_not_as_read_keep_nothing_and_raise_nothing() -> None:
    """No policy version, a version that is no integer, versions that are no list, tokens of another length: the
    versions are kept without tokens or not at all; nothing raises."""
    _versions.consumed(None, [1], None, "test")
    _versions.consumed(3, [Fraction(1, 2)], None, "test")
    _versions.consumed(3, 7, None, "test")  # type: ignore[arg-type]
    assert _versions.take("policy_training") == {}
    _versions.consumed(3, [1, 2], [10], "test")
    assert _versions.take("policy_training") == {"policy_version": 3, "trajectory_versions": [1, 2]}


def test_a_generation_version_is_set_only_when_it_is_an_integer() -> None:
    """generating(v) is set_weight_version(v) for an integer (numpy's too); None or a float leaves it as it was."""
    _versions.generating(_NumpyLikeInt(7), "test")
    assert RUNTIME.weight_version == 7
    _versions.generating(None, "test")
    _versions.generating(7.5, "test")
    assert RUNTIME.weight_version == 7


def test_unweaving_forgets_the_weight_version_a_weave_set_but_not_the_jobs_own() -> None:
    """After a framework is unwoven, a later training of the process does not carry the version the weave set
    last; a version the job set itself since stays."""
    _versions.generating(7, "test")
    assert RUNTIME.weight_version == 7
    _versions.reset()
    assert RUNTIME.weight_version is None
    _versions.generating(8, "test")
    lens_rl.set_weight_version(3)
    _versions.reset()
    assert RUNTIME.weight_version == 3


def test_a_skyrl_conversion_that_raises_leaves_no_consumption_for_the_next_training_phase() -> None:
    """SkyRL's conversion raising: the error is SkyRL's own, and no training phase takes what it was given."""
    from types import SimpleNamespace

    from lens_rl.frameworks import skyrl

    group = SimpleNamespace(global_step_when_scheduled=2, generator_output={"response_ids": [[1, 2, 3]]})

    def convert(groups: object) -> object:
        raise RuntimeError("SkyRL's own error")

    with pytest.raises(RuntimeError, match="SkyRL's own error"):
        skyrl._convert(convert, SimpleNamespace(global_step=4), ([group],), {})
    assert _versions.take("policy_training") == {}
