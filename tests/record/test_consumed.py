"""What a training phase says it consumed (``lens_rl.record.consumed``): traced_phase's staleness keywords checked
at the call, and recorded as an exact version histogram whatever the batch's size, live and offline alike."""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import numpy as np
import pytest

import lens_rl
from lens_rl import testing
from lens_rl.frameworks._phases import close_phase, open_phase
from lens_rl.frameworks._versions import attributes
from lens_rl.record import consumed
from tests.record.test_impl import IMPLS, _off
from tests.stores import rollup_recorded

#: (keywords, the keyword the error names, a piece of what it says is allowed)
BAD: list[tuple[dict[str, Any], str, str]] = [
    ({"trajectory_versions": "abc"}, "trajectory_versions", "a list or tuple of ints"),
    ({"trajectory_versions": 3}, "trajectory_versions", "a list or tuple of ints"),
    ({"trajectory_versions": {1: 2}}, "trajectory_versions", "a list or tuple of ints"),
    ({"trajectory_versions": [1, 2], "trajectory_tokens": [10]}, "trajectory_tokens", "one per item"),
    ({"trajectory_tokens": [10]}, "trajectory_tokens", "one per item"),
    ({"trajectory_versions": [1], "trajectory_tokens": {"a": 1}}, "trajectory_tokens", "numbers >= 0"),
    ({"trajectory_versions": [1], "policy_version": "v3"}, "policy_version", "an int in [-2**63, 2**63)"),
    ({"trajectory_versions": [1], "policy_version": 2.5}, "policy_version", "an int in"),
    ({"trajectory_versions": [1], "max_staleness": -1}, "max_staleness", "an int >= 0"),
    ({"trajectory_versions": [1], "max_staleness": "2"}, "max_staleness", "an int >= 0"),
]


class _HashRaises(int):
    """An int whose hash raises what it likes (not TypeError)."""

    def __hash__(self) -> int:
        raise RuntimeError("no hash")


#: bad items: found while on (reading every item costs a batch's size: off stays free of it), one warning each
BAD_ITEMS: list[tuple[dict[str, Any], str, str]] = [
    ({"trajectory_versions": [1, "x"]}, "trajectory_versions", "(item 1: 'x')"),
    ({"trajectory_versions": [float("nan")]}, "trajectory_versions", "(item 0: nan)"),
    ({"trajectory_versions": [True, False]}, "trajectory_versions", "(item 0: True)"),
    ({"trajectory_versions": [1, float("inf")]}, "trajectory_versions", "(item 1: inf)"),
    ({"trajectory_versions": [1, [2]]}, "trajectory_versions", "(item 1: [2])"),
    ({"trajectory_versions": [1, (1, [2])]}, "trajectory_versions", "(item 1: (1, [2]))"),
    ({"trajectory_versions": [1, 2**70]}, "trajectory_versions", "(item 1: "),
    ({"trajectory_versions": [1, 2], "trajectory_tokens": [-100, 10]}, "trajectory_tokens", "(item 0: -100)"),
    ({"trajectory_versions": [1, 2], "trajectory_tokens": [5, float("nan")]}, "trajectory_tokens", "(item 1: nan)"),
    ({"trajectory_versions": [1, 2], "trajectory_tokens": [5, "x"]}, "trajectory_tokens", "(item 1: 'x')"),
]


@pytest.mark.parametrize("tp", IMPLS)
def test_bad_staleness_keywords_are_refused_at_the_call_naming_keyword_value_and_allowed(tp: Any) -> None:
    """A value of the wrong type for traced_phase's staleness keywords (or tokens not one per version) is a
    ValueError at the call naming the keyword, the value and what is allowed, with telemetry on and off alike
    (as step=); nothing of the refused phase is recorded."""
    _off()
    for on in (False, True):
        with testing.recording() if on else contextlib.nullcontext() as rec:
            for said, keyword, allowed in BAD:
                with pytest.raises(ValueError) as caught:
                    with tp("policy_training", **said):
                        pass
                message = str(caught.value)
                assert message.startswith(f"traced_phase: {keyword} must be "), message
                assert allowed in message and ", got " in message, message
            if on:
                assert rec.find_all("policy_training") == []


@pytest.mark.parametrize("tp", IMPLS)
def test_a_bad_item_is_one_warning_and_no_staleness_never_a_raise(tp: Any, caplog: pytest.LogCaptureFixture) -> None:
    """A bad item inside the lists (read only while on, so off stays free of a batch's size) never raises where
    off did not: the phase runs and is recorded without what it consumed, and a warning names the keyword, the
    value, the item and what is allowed (once per keyword, then at debug level)."""
    caplog.set_level(logging.DEBUG, logger="lens_rl")
    _off()
    for said, _, _ in BAD_ITEMS:
        with tp("policy_training", **said):
            pass
    with testing.recording() as rec:
        for said, keyword, item in BAD_ITEMS:
            ran = False
            with tp("policy_training", **said):
                ran = True
            assert ran
            assert f"traced_phase: {keyword} must be " in caplog.text and item in caplog.text, (keyword, item)
        spans = rec.find_all("policy_training")
    assert len(spans) == len(BAD_ITEMS)
    assert not [s for s in spans if any(k.startswith("rl.trajectory") for k in dict(s.attributes))]
    assert "records no staleness" in caplog.text


@pytest.mark.parametrize("tp", IMPLS)
def test_numpy_integers_and_arrays_are_taken_as_ints(tp: Any) -> None:
    """numpy integer scalars and 1-d numpy arrays (versions int64, tokens int or float) are accepted and recorded
    as plain ints and numbers; set_weight_version takes a numpy integer too."""
    versions = np.array([3, 3, 2], np.int64)
    with testing.recording() as rec:
        lens_rl.set_weight_version(np.int64(4))  # type: ignore[arg-type]
        with tp("step", step=4), tp("generation"):
            pass
        with tp("step", step=5):
            with tp("policy_training", policy_version=np.int64(5), trajectory_versions=versions,
                    trajectory_tokens=np.array([10.0, 20.0, 5.0]), max_staleness=np.int32(2)):  # fmt: skip
                pass
        live = lens_rl.step_metrics()
        with tp("policy_training", trajectory_versions=[np.int64(1), 1, np.int16(0)]):
            pass
        lens_rl.set_weight_version(None)
    first, second = (dict(s.attributes) for s in rec.find_all("policy_training"))
    assert dict(rec.find("generation").attributes)["rl.weight_version"] == 4
    assert first["rl.policy_version"] == 5 and type(first["rl.policy_version"]) is int
    assert first["rl.max_staleness"] == 2
    assert [list(first[f"rl.trajectory_{k}"]) for k in ("versions", "counts", "tokens")] == [
        [2, 3],
        [1, 2],
        [5.0, 30.0],
    ]
    assert [list(second[f"rl.trajectory_{k}"]) for k in ("versions", "counts")] == [[0, 1], [1, 2]]
    assert live["goodput/pipeline/staleness_max"] == 3.0  # 5 - 2


def test_a_batch_of_thousands_is_exact_live_and_offline() -> None:
    """A step consuming 1024 trajectories (768 one version old, 256 three old, one token each) reads mean 1.5,
    p90 3, max 3 and 1024 trajectories both in step_metrics() and the offline pipeline, not the 128 first; the
    span carries 3 short lists, not 2 of 1024."""
    with testing.recording() as rec:
        for step in (3, 4):
            versions = [step - 1] * 768 + [step - 3] * 256
            with lens_rl.traced_phase("step", step=step):
                with lens_rl.traced_phase(
                    "policy_training", trajectory_versions=versions, trajectory_tokens=[1] * 1024, max_staleness=2
                ):
                    pass
            live = {k.split("/")[-1]: v for k, v in lens_rl.step_metrics().items() if "staleness" in k}
            assert live == {"staleness_mean": 1.5, "staleness_p90": 3.0, "staleness_max": 3.0, "staleness_beyond": 0.25}
        offline = rollup_recorded(rec.spans, warmup_steps=0)
        attrs = dict(rec.find_all("policy_training")[-1].attributes)
    stale = offline["pipeline"]["staleness"]
    assert (stale["mean"], stale["p90"], stale["max"], stale["beyond"]) == (1.5, 3, 3, 0.25)
    assert stale["trajectories"] == 2048 and stale["tokens"] == 2048.0
    for row in offline["pipeline"]["per_step"]:
        assert (row["staleness_mean"], row["staleness_max"], row["staleness_beyond"]) == (1.5, 3, 0.25)
    recorded = [list(attrs[f"rl.trajectory_{k}"]) for k in ("versions", "counts", "tokens")]
    assert recorded == [[1, 3], [256, 768], [256, 768]]


def test_a_woven_frameworks_consumption_is_the_same_exact_histogram() -> None:
    """What a weave hands a training phase (frameworks._versions.attributes, plain lists of 3000 trajectories)
    is recorded as the same histogram traced_phase records, and reads the same staleness."""
    versions = [9] * 2000 + [7] * 1000
    tokens = [3] * 3000
    with testing.recording() as rec:
        with lens_rl.traced_phase("step", step=10):
            said = attributes(10, versions, tokens, "test", bound=2)
            assert said is not None
            close_phase(open_phase("policy_training", **said))
        woven = lens_rl.step_metrics()
        with lens_rl.traced_phase("step", step=10):
            with lens_rl.traced_phase("policy_training", **said):
                pass
        own = lens_rl.step_metrics()
    first, second = (dict(s.attributes) for s in rec.find_all("policy_training"))
    keys = [f"rl.trajectory_{k}" for k in ("versions", "counts", "tokens")]
    assert [list(first[k]) for k in keys] == [list(second[k]) for k in keys] == [[7, 9], [1000, 2000], [3000, 6000]]
    assert {k: v for k, v in woven.items() if "staleness" in k} == {k: v for k, v in own.items() if "staleness" in k}
    assert woven["goodput/pipeline/staleness_max"] == 3.0 and woven["goodput/pipeline/staleness_beyond"] == round(
        1 / 3, 6
    )


def test_more_versions_than_the_span_holds_keeps_the_oldest_and_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    """A batch of more distinct versions than MAX_VERSIONS records the oldest MAX_VERSIONS (what max needs), with
    one warning saying how many there were: the span stays bounded."""
    versions = list(range(consumed.MAX_VERSIONS + 10))
    got = consumed.consumed({"trajectory_versions": versions[::-1], "trajectory_tokens": [1] * len(versions)})
    assert got["trajectory_versions"] == versions[: consumed.MAX_VERSIONS]
    assert got["trajectory_counts"] == got["trajectory_tokens"] == [1] * consumed.MAX_VERSIONS
    assert f"{consumed.MAX_VERSIONS + 10} distinct versions" in caplog.text


@pytest.mark.parametrize("tp", IMPLS)
def test_an_item_whose_hash_raises_is_one_warning_never_a_raise(tp: Any, caplog: pytest.LogCaptureFixture) -> None:
    """An item whose own __hash__ raises (not a TypeError) never raises into the training code while on: the phase
    runs, records no staleness, and one warning names the item."""
    caplog.set_level(logging.DEBUG, logger="lens_rl")
    with testing.recording() as rec:
        ran = False
        with tp("policy_training", trajectory_versions=[1, _HashRaises(2)]):
            ran = True
        assert ran
    assert not [k for k in dict(rec.find("policy_training").attributes) if k.startswith("rl.trajectory")]
    assert "(item 1: 2) (no hash)" in caplog.text and "records no staleness" in caplog.text


@pytest.mark.parametrize("tp", IMPLS)
def test_torch_tensors_and_whole_floats_are_taken_as_ints_on_and_off(tp: Any) -> None:
    """A 1-d torch tensor as trajectory_versions / trajectory_tokens (how veRL holds a batch) and a whole float as
    policy_version or max_staleness are accepted with telemetry off, as before staleness was checked, and recorded
    as the same exact histogram while on."""
    torch = pytest.importorskip("torch")
    said = {
        "trajectory_versions": torch.tensor([3, 3, 2]),
        "trajectory_tokens": torch.tensor([10, 20, 5]),
        "policy_version": 4.0,
        "max_staleness": 2.0,
    }
    _off()
    with tp("step", step=1), tp("policy_training", **said):
        pass
    with testing.recording() as rec:
        with tp("step", step=1), tp("policy_training", **said):
            pass
    got = dict(rec.find("policy_training").attributes)
    assert [list(got[f"rl.trajectory_{k}"]) for k in ("versions", "counts", "tokens")] == [[2, 3], [1, 2], [5, 30]]
    assert got["rl.policy_version"] == 4 and type(got["rl.policy_version"]) is int and got["rl.max_staleness"] == 2


@pytest.mark.parametrize("tp", IMPLS)
def test_a_batch_given_each_step_is_never_kept_alive_by_the_phase_cache(tp: Any) -> None:
    """A training phase given each step's batch (a 1,024-item tuple of versions) or any long tuple keeps no entry
    in the phase cache, so memory stays flat over many steps while on (the cache would keep every batch)."""
    from lens_rl._runtime import RUNTIME

    with testing.recording():
        before = len(RUNTIME.phase_cache)
        for s in range(200):
            versions = tuple(s - (i % 3) for i in range(1024))
            with tp("policy_training", step=s, bucket="productive", trajectory_versions=versions, policy_version=s):
                pass
            with tp("policy_training", step=s, policy_version=s), tp("ids", step=s, ids=tuple(range(s, s + 100))):
                pass
        assert len(RUNTIME.phase_cache) - before == 0


def test_a_trajectory_of_zero_tokens_is_still_consumed_live_and_offline() -> None:
    """Trajectories of 0 tokens (an empty or aborted generation; tokens >= 0 are allowed) weigh nothing in the
    mean but were consumed: 5 versions behind with a bound of 1, they make the max 5 and the share beyond 1/2, and
    count among the trajectories; a step whose every trajectory has 0 tokens counts each once (never no figure)."""
    with testing.recording() as rec:
        for step, tokens in ((5, [0, 10]), (6, [0, 0])):
            with lens_rl.traced_phase("step", step=step):
                with lens_rl.traced_phase(
                    "policy_training", trajectory_versions=[0, step], trajectory_tokens=tokens, max_staleness=1
                ):
                    pass
            live = {k.split("/")[-1]: v for k, v in lens_rl.step_metrics().items() if "staleness" in k}
            assert live["staleness_max"] == float(step) and live["staleness_beyond"] == 0.5, live
        assert live["staleness_mean"] == 3.0  # (step 6: 6 and 0 behind, each once)
        offline = rollup_recorded(rec.spans, warmup_steps=0)
    rows = {row["step"]: row for row in offline["pipeline"]["per_step"]}
    assert (rows[5]["staleness_mean"], rows[5]["staleness_max"], rows[5]["staleness_beyond"]) == (0.0, 5, 0.5)
    assert (rows[6]["staleness_mean"], rows[6]["staleness_max"], rows[6]["staleness_beyond"]) == (3.0, 6, 0.5)
    stale = offline["pipeline"]["staleness"]
    assert stale["max"] == 6 and stale["beyond"] == 0.5 and stale["trajectories"] == 4 and stale["tokens"] == 10.0
