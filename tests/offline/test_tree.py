"""One tree rule in every command: parent links of any shape (a self-parent, a 2-cycle, a long cycle through a
step umbrella, a chain 5,000 deep) never hang a command, every command agrees on each span's step, and the
broken cycles are counted; nested unbucketed spans make one step's tree."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lens_rl.offline.read.columns import read_columns
from lens_rl.offline.read.reduce import link
from lens_rl.offline.read.reduce import resolve as reduce_resolve
from lens_rl.offline.read.tree import depths, parent_rows, resolve, steps_of_rows
from lens_rl.offline.run.analyze import analyze
from lens_rl.offline.run.timeline import window_file
from lens_rl.offline.show.perfetto import write_trace
from lens_rl.offline.show.report import build_report
from lens_rl.store import iter_rows, span_files
from tests.stores import header, span, span_id, write_process


def _driver(run: Path, spans: list[dict[str, Any]], *, end: float = 100) -> Path:
    return write_process(run, "driver", 0, 1, [span("rl.job", 0, end, "job"), *spans], root="job", role="driver")


def _steps(spans: list[dict[str, Any]], first: int = 0, count: int = 2) -> list[dict[str, Any]]:
    """Well-formed steps (an umbrella over a productive phase) beside the odd shapes."""
    rows = []
    for i in range(first, first + count):
        t = 50 + 10 * i
        rows += [
            span("generation", t, t + 8, f"g{i}", parent=f"u{i}", bucket="productive"),
            span("step", t, t + 10, f"u{i}", parent="job", step=i),
        ]
    return spans + rows


def _reduce_steps(path: Path) -> dict[str, Any]:
    """span id -> step, as the goodput read (reduce, the critical path) decides it."""
    out: dict[str, Any] = {}
    for cols in read_columns(path).values():
        ids = [f"{i:016x}" if type(i) is int else i for i in cols.ids]
        tree = link(cols)
        reduce_resolve(tree)
        out.update(zip(ids, tree.steps, strict=True))
    return out


def _rows_steps(path: Path) -> dict[str, Any]:
    """span id -> step, as Perfetto --steps and the report's timeline decide it."""
    rows = [row for _, row in iter_rows(path)]
    steps, _cycles = steps_of_rows(rows)
    return {row.s: step for row, step in zip(rows, steps, strict=True)}


def _every_command(run: Path, tmp_path: Path) -> dict[str, Any]:
    """goodput (with its critical path), the table, the report and Perfetto --steps for every int step; checks
    that each command puts each span in the same step; returns the goodput report."""
    paths = span_files(run)
    report = analyze(paths, jobs=1)
    if importlib.util.find_spec("plotly") is not None:  # (the report's extra)
        assert "<html" in build_report(paths, jobs=1)
    names_by_id = {row.s: row.n for path in paths for _, row in iter_rows(path)}
    by_rule: dict[str, Any] = {}
    for path in paths:
        from_reduce, from_rows = _reduce_steps(path), _rows_steps(path)
        assert from_reduce == from_rows
        by_rule.update(from_rows)
    for step in sorted({s for s in by_rule.values() if type(s) is int}):
        expected = sorted(names_by_id[i] for i, s in by_rule.items() if s == step)
        out = tmp_path / f"trace-{step}.json"
        write_trace(paths, out, steps=(step, step), jobs=1)
        events = json.loads(out.read_text())
        events = events["traceEvents"] if isinstance(events, dict) else events
        assert sorted(e["name"] for e in events if e.get("ph") == "X") == expected
        drawn = [s for path in paths for s in window_file(path, (step, step), 100_000, None)]
        assert sorted(s["name"] for s in drawn) == expected
    return report


@pytest.mark.timeout(30)
def test_a_span_that_is_its_own_parent(tmp_path: Path) -> None:
    """A phase naming itself as parent: every command finishes, agrees on its step (its own), counts one
    broken cycle and says so in a note."""
    run = tmp_path / "r1"
    looped = span("reward", 1, 2, "self", bucket="overhead")
    looped["p"] = span_id("self")
    _driver(run, _steps([looped]))
    report = _every_command(run, tmp_path)
    assert report["broken_cycles"] == 1
    assert any("1 parent cycle(s) broken" in note for note in report["notes"])
    assert [r["step"] for r in report["steps"]] == [0, 1]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("umbrella_first", [False, True])
def test_a_step_umbrella_and_its_phase_naming_each_other_as_parents(tmp_path: Path, umbrella_first: bool) -> None:
    """The 2-cycle that made the critical path loop with unbounded memory (both ending at once): every command
    finishes, the cycle is cut at its first span in the file, and the step keeps its wall."""
    run = tmp_path / "r1"
    cycle = [
        span("generation", 1, 10, "p", parent="u", bucket="productive"),
        span("step", 1, 10, "u", parent="p", step=7),
    ]
    _driver(run, _steps(cycle[::-1] if umbrella_first else cycle))
    report = _every_command(run, tmp_path)
    assert report["broken_cycles"] == 1
    inside = [w for w in report["warnings"] if w["kind"] == "step_inside_phase"]
    assert len(inside) == (0 if umbrella_first else 1)  # cut at the phase: the step lies inside it
    assert {r["step"] for r in report["steps"]} == {0, 1, 7}
    seven = next(r for r in report["steps"] if r["step"] == 7)
    assert seven["wall_s"] == 9.0
    assert {r["step"] for r in report["critical_path"]["steps"]} == {0, 1, 7}


@pytest.mark.timeout(30)
def test_a_long_cycle_through_a_step_umbrella(tmp_path: Path) -> None:
    """Five spans in a ring with a step umbrella among them, and a worker span hanging from the ring: every
    command finishes, agrees on each span's step and counts one cycle."""
    run = tmp_path / "r1"
    ring = ["a", "b", "c", "d", "u"]
    spans = []
    for n, label in enumerate(ring):
        parent = ring[(n + 1) % len(ring)]
        if label == "u":
            spans.append(span("step", 1, 20, "u", parent=parent, step=3))
        else:
            spans.append(span(f"phase_{label}", 2 + n, 10 + n, label, parent=parent, bucket="productive"))
    _driver(run, _steps(spans))
    write_process(
        run,
        "lm_policy",
        0,
        2,
        [span("policy_training", 3, 5, "w", parent="b", remote=True, step=3, bucket="productive")],
    )
    report = _every_command(run, tmp_path)
    assert report["broken_cycles"] == 1
    assert 3 in {r["step"] for r in report["steps"]}


@pytest.mark.timeout(30)
def test_many_cycles_in_one_file_are_each_counted(tmp_path: Path) -> None:
    """200 separate 2-cycles in one file: each broken once, counted 200 times, in linear time."""
    run = tmp_path / "r1"
    spans = []
    for k in range(200):
        spans += [
            span("x", 1, 2, f"x{k}", parent=f"y{k}", bucket="overhead"),
            span("y", 1, 3, f"y{k}", parent=f"x{k}", step=k),
        ]
    _driver(run, spans)
    report = _every_command(run, tmp_path)
    assert report["broken_cycles"] == 200


@pytest.mark.timeout(60)
def test_a_chain_five_thousand_deep(tmp_path: Path) -> None:
    """A step umbrella over a chain of 5,000 nested spans (written deepest first): every command finishes
    without recursion, every span of the chain is in the umbrella's step, and the productive leaf's time is
    counted once."""
    run = tmp_path / "r1"
    depth = 5000
    chain = []
    for k in reversed(range(depth)):
        bucket = "productive" if k == depth - 1 else None
        chain.append(
            span(f"level{k}", 1 + k * 1e-4, 9 - k * 1e-4, f"c{k}", parent=f"c{k - 1}" if k else "u", bucket=bucket)
        )
    chain.append(span("step", 1, 10, "u", parent="job", step=5))
    _driver(run, _steps(chain))
    report = _every_command(run, tmp_path)
    assert report["broken_cycles"] == 0
    five = next(r for r in report["steps"] if r["step"] == 5)
    assert five["seconds"]["productive"] == pytest.approx(8 - 2 * (depth - 1) * 1e-4, abs=1e-6)
    top = next(r for r in report["critical_path"]["steps"] if r["step"] == 5)
    assert top["critical_s"] == pytest.approx(9.0, abs=1e-6)


@pytest.mark.timeout(60)
def test_the_cli_finishes_on_a_cycle(tmp_path: Path) -> None:
    """``lens-rl goodput --json``, ``report`` and ``perfetto --steps`` as a user runs them, on the 2-cycle
    through a step umbrella: each exits 0 within the timeout."""
    run = tmp_path / "r1"
    _driver(
        run,
        _steps(
            [
                span("generation", 1, 10, "p", parent="u", bucket="productive"),
                span("step", 1, 10, "u", parent="p", step=7),
            ]
        ),
    )
    for args in (
        ["goodput", str(run), "--json", "--no-cache"],
        ["report", str(run), "-o", str(tmp_path / "r.html"), "--no-cache"],
        ["perfetto", str(run), "-o", str(tmp_path / "t.json"), "--steps", "7-7"],
    ):
        done = subprocess.run([sys.executable, "-m", "lens_rl", *args], capture_output=True, text=True, timeout=50)
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
    report = json.loads(
        subprocess.run(
            [sys.executable, "-m", "lens_rl", "goodput", str(run), "--json", "--no-cache"],
            capture_output=True,
            text=True,
            timeout=50,
        ).stdout
    )
    assert report["broken_cycles"] == 1


def test_the_cut_depends_on_the_order_of_the_spans_only() -> None:
    """A cycle is cut at its first span in file order, whichever span the walk met first: the same cut for
    the file and for any subset that keeps the cycle (what the refresh cache reduces)."""
    for start in range(4):
        ids = ["a", "b", "c", "d"]
        ring = {"a": "b", "b": "c", "c": "d", "d": "a"}
        order = ids[start:] + ids[:start]
        parents = parent_rows(order, [ring[i] for i in order])
        tree = resolve(parents, [None] * 4, [None] * 4, order)
        assert tree.cycles == 1
        assert [order[i] for i, p in enumerate(parents) if p == -1] == [order[0]]
        assert sorted(depths(parents).values()) == [0, 1, 2, 3]


# ------------------------------------------------------------------------------ nested unbucketed spans


def _nested(run: Path) -> Path:
    """TRL's shape: ``train`` > ``training_step`` > ``compute_loss``, all with ``rl.step`` and no bucket,
    around a 0.30 s ``backward`` (productive) and a 0.05 s ``optimizer`` (overhead); two steps of 1 s."""
    spans = []
    for i in range(2):
        t = 10 + i
        spans += [
            span("backward", t + 0.2, t + 0.5, f"b{i}", parent=f"cl{i}", bucket="productive", step=i),
            span("compute_loss", t + 0.1, t + 0.6, f"cl{i}", parent=f"ts{i}", step=i),
            span("optimizer", t + 0.7, t + 0.75, f"o{i}", parent=f"ts{i}", bucket="overhead", step=i),
            span("training_step", t + 0.05, t + 0.9, f"ts{i}", parent=f"tr{i}", step=i),
            span("train", t, t + 1, f"tr{i}", parent="job", step=i),
        ]
    _driver(run, spans, end=20)
    return run


@pytest.mark.timeout(30)
def test_nested_unbucketed_spans_count_each_phase_once(tmp_path: Path) -> None:
    """Only the outermost span with a step and no bucket is the step's umbrella: the 0.30 s backward is 0.30 s
    a step on the critical path (not 0.90 s, not over 100 % of the wall), each step's wall is 1 s, and the
    phases' exclusive seconds add up to the steps' time once."""
    report = _every_command(_nested(tmp_path / "r1"), tmp_path)
    steps = {r["step"]: r for r in report["steps"]}
    assert set(steps) == {0, 1} and all(r["wall_s"] == 1.0 for r in steps.values())
    crit = {(r["phase"], r["bucket"]): r for r in report["critical_path"]["phases"]}
    assert crit[("backward", "productive")]["critical_s"] == pytest.approx(0.6)
    assert crit[("backward", "productive")]["critical_share"] == pytest.approx(0.3)
    assert all(r["critical_share"] <= 1.0 for r in crit.values())
    assert sum(r["critical_s"] for r in report["critical_path"]["steps"]) == pytest.approx(2.0)
    phases = {r["phase"]: r for r in report["phases"]}
    assert phases["backward"]["exclusive_s"] == pytest.approx(0.6)
    assert phases["compute_loss"]["exclusive_s"] == pytest.approx(0.4)  # 0.5 less the backward's 0.3, x2
    assert phases["training_step"]["exclusive_s"] == pytest.approx(0.6)  # 0.85 - 0.5 - 0.05, x2
    assert phases["train"]["exclusive_s"] == pytest.approx(0.3)  # 1 - 0.85, x2
    assert sum(r["exclusive_s"] for r in report["phases"]) == pytest.approx(2.0)
    assert phases["train"]["total_s"] == pytest.approx(2.0)


@pytest.mark.timeout(30)
def test_a_parent_phase_shares_only_its_own_time(tmp_path: Path) -> None:
    """``data_processing`` (overhead, 10 s) holds 9.9 s of productive training: its share of the wall is its
    own 0.1 s, not 10 s, and ``exclusive_s`` says so beside the inclusive total."""
    run = tmp_path / "r1"
    _driver(
        run,
        [
            span("policy_training", 0.05, 9.95, "t", parent="d", bucket="productive", step=0),
            span("data_processing", 0, 10, "d", parent="u", bucket="overhead", step=0),
            span("step", 0, 10, "u", parent="job", step=0),
        ],
        end=10,
    )
    report = analyze(span_files(run), jobs=1)
    rows = {r["phase"]: r for r in report["phases"]}
    assert rows["data_processing"]["total_s"] == pytest.approx(10.0)
    assert rows["data_processing"]["exclusive_s"] == pytest.approx(0.1)
    assert rows["data_processing"]["share"] == pytest.approx(0.01)
    assert rows["policy_training"]["share"] == pytest.approx(0.99)


# ------------------------------------------------------------------------------------------- warnings


@pytest.mark.timeout(30)
def test_a_bucketed_phase_around_the_steps_is_warned(tmp_path: Path) -> None:
    """``with traced_phase("train"): trainer.train()``: the productive ``train`` encloses the step umbrellas;
    a warning names it, in ``--json`` and in the table."""
    from lens_rl.offline.show.table import format_table

    run = tmp_path / "r1"
    spans = []
    for i in range(3):
        t = 1 + 2 * i
        spans += [
            span("generation", t, t + 0.4, f"g{i}", parent=f"u{i}", bucket="productive"),
            span("step", t, t + 2, f"u{i}", parent="train", step=i),
        ]
    spans.append(span("train", 0.5, 7.5, "train", parent="job", bucket="productive"))
    _driver(run, spans, end=8)
    report = analyze(span_files(run), jobs=1)
    inside = [w for w in report["warnings"] if w["kind"] == "step_inside_phase"]
    assert len(inside) == 1
    assert (inside[0]["phase"], inside[0]["bucket"], inside[0]["steps"]) == ("train", "productive", 3)
    assert "'train'" in inside[0]["message"] and "does not apply to the steps" in inside[0]["message"]
    assert "warning: 3 step umbrella(s) lie inside the productive phase 'train'" in format_table(report)
    if importlib.util.find_spec("plotly") is not None:  # (the report's extra)
        assert "does not apply to the steps" in build_report(span_files(run), jobs=1)


@pytest.mark.timeout(30)
def test_unattributed_time_is_warned_with_where_it_falls(tmp_path: Path) -> None:
    """A forgotten backward: 46 % of every step between ``forward`` and ``optimizer`` on the driver is covered
    by no bucketed phase; the warning names the share, the two phases and the process."""
    from lens_rl.offline.show.table import format_table

    run = tmp_path / "r1"
    spans = []
    for i in range(4):
        t = 1 + i
        spans += [
            span("forward", t, t + 0.3, f"f{i}", parent=f"u{i}", bucket="productive"),
            span("optimizer", t + 0.76, t + 1, f"o{i}", parent=f"u{i}", bucket="productive"),
            span("step", t, t + 1, f"u{i}", parent="job", step=i),
        ]
    _driver(run, spans, end=6)
    report = analyze(span_files(run), jobs=1)
    [warning] = [w for w in report["warnings"] if w["kind"] == "unattributed"]
    assert warning["share"] == pytest.approx(0.46)
    assert warning["between"] == ["forward", "optimizer"]
    assert (warning["worker_group"], warning["rank"], warning["pid"]) == ("driver", 0, 1)
    assert "46% of the steps' wall is unattributed" in warning["message"]
    assert "between 'forward' and 'optimizer' on driver rank 0" in format_table(report)


@pytest.mark.timeout(30)
def test_no_warning_on_a_well_instrumented_job(tmp_path: Path) -> None:
    """Steps covered by their phases, no enclosing phase: no warning."""
    run = tmp_path / "r1"
    _driver(run, _steps([], count=3))
    assert analyze(span_files(run), jobs=1)["warnings"] == [
        w for w in analyze(span_files(run), jobs=1)["warnings"] if w["kind"] != "step_inside_phase"
    ]
    assert all(w["kind"] != "unattributed" for w in analyze(span_files(run), jobs=1)["warnings"])


# ------------------------------------------------------------------------------------------- the timeline


@pytest.mark.timeout(60)
def test_the_timeline_draws_children_over_their_parents(tmp_path: Path) -> None:
    """An overhead parent over productive children: the children's trace comes after (over) the parent's, so
    a mostly productive step looks productive."""
    pytest.importorskip("plotly")
    from tests.offline.test_report import figures

    run = tmp_path / "r1"
    spans = []
    for i in range(3):
        t = 1 + 10 * i
        spans += [
            span("policy_training", t + 0.1, t + 9.9, f"t{i}", parent=f"d{i}", bucket="productive"),
            span("data_processing", t, t + 10, f"d{i}", parent=f"u{i}", bucket="overhead"),
            span("step", t, t + 10, f"u{i}", parent="job", step=i),
        ]
    _driver(run, spans, end=40)
    timeline = figures(build_report(span_files(run), jobs=1))["timeline"]
    order = [trace["name"] for trace in timeline["data"]]
    assert order.index("no bucket (umbrellas)") < order.index("overhead") < order.index("productive")
    assert sum(1 for trace in timeline["data"] if trace["showlegend"] is not False) == 3


# ------------------------------------------------------------------------------------------- vLLM's spans


def _requests(start: float, parent: str, label: str, *, remote: bool = False) -> list[dict[str, Any]]:
    """Four concurrent vLLM ``llm_request`` spans of 8 s (another library's scope, 100 completion and 20
    prompt tokens each) under the span ``parent``, from ``start`` + 1 s."""
    out = []
    for k in range(4):
        request = span(
            "llm_request",
            start + 1,
            start + 9,
            f"{label}-{k}",
            parent=parent,
            remote=remote,
            **{"gen_ai.usage.completion_tokens": 100, "gen_ai.usage.prompt_tokens": 20},
        )
        request["sc"] = "vllm.tracing"
        out.append(request)
    return out


def _vllm_job(run: Path, *, with_requests: bool) -> Path:
    """Two steps; each a 10 s ``generation`` phase (productive) with four concurrent vLLM ``llm_request``
    spans (scope vLLM's, 100 completion tokens each, 8 s each) under it, then a 5 s ``policy_training``."""
    spans = []
    for i in range(2):
        t = 1 + 20 * i
        if with_requests:
            spans += _requests(t, f"g{i}", f"q{i}")
        spans += [
            span("generation", t, t + 10, f"g{i}", parent=f"u{i}", bucket="productive", step=i),
            span("policy_training", t + 10, t + 15, f"p{i}", parent=f"u{i}", bucket="productive", step=i),
            span("step", t, t + 16, f"u{i}", parent="job", step=i),
        ]
    _driver(run, spans, end=45)
    return run


@pytest.mark.timeout(60)
def test_vllm_request_spans_are_not_phases(tmp_path: Path) -> None:
    """vLLM's ``llm_request`` spans (another library's scope, four concurrent under a generation phase) leave
    goodput, the steps and the phase table as they are, raise no unbucketed warning, and give the generation
    phase its tokens/s from their ``gen_ai.usage.completion_tokens``."""
    bare = analyze(span_files(_vllm_job(tmp_path / "bare", with_requests=False)), jobs=1)
    report = _every_command(_vllm_job(tmp_path / "vllm", with_requests=True), tmp_path)
    assert report["goodput"] == bare["goodput"]
    assert report["steady_state_goodput"] == bare["steady_state_goodput"]
    assert [{k: v for k, v in r.items() if k != "tokens"} for r in report["steps"]] == [
        {k: v for k, v in r.items() if k != "tokens"} for r in bare["steps"]
    ]
    assert [r["tokens"] for r in report["steps"]] == [400, 400]  # the step's generation phase's tokens
    assert report["job"] == bare["job"]
    assert report["unbucketed_phases"] == [] and report["warnings"] == bare["warnings"]
    assert [r["phase"] for r in report["phases"]] == [r["phase"] for r in bare["phases"]]
    assert "llm_request" not in json.dumps(report["phases"]) + json.dumps(report["critical_path"])
    for mine, theirs in zip(report["phases"], bare["phases"], strict=True):
        assert {k: v for k, v in mine.items() if k != "tokens_per_s"} == {
            k: v for k, v in theirs.items() if k != "tokens_per_s"
        }
    generation = next(r for r in report["phases"] if r["phase"] == "generation")
    assert generation["tokens_per_s"] == pytest.approx(800 / 20)  # 4 x 100 tokens a step, over its 10 s
    assert next(r for r in report["phases"] if r["phase"] == "policy_training")["tokens_per_s"] is None
    assert report["critical_path"] == bare["critical_path"]


@pytest.mark.timeout(30)
def test_a_phase_with_its_own_token_count_keeps_it(tmp_path: Path) -> None:
    """Where the phase sets ``rl.num_tokens`` itself, its requests' ``gen_ai.usage`` counts are not added."""
    run = tmp_path / "r1"
    request = span("llm_request", 1, 2, "q", parent="g", **{"gen_ai.usage.output_tokens": 999})
    request["sc"] = "vllm"
    _driver(
        run,
        [
            request,
            span("generation", 0, 4, "g", parent="u", bucket="productive", step=0, **{"rl.num_tokens": 40}),
            span("step", 0, 4, "u", parent="job", step=0),
        ],
        end=5,
    )
    report = analyze(span_files(run), jobs=1)
    assert next(r for r in report["phases"] if r["phase"] == "generation")["tokens_per_s"] == pytest.approx(10.0)


# ------------------------------------------------------------------------------------------- the refresh cache


@pytest.mark.timeout(60)
def test_the_refresh_cache_answers_as_a_cold_read_on_every_shape(tmp_path: Path) -> None:
    """A store with a 2-cycle, a self-parent, nested unbucketed steps, vLLM requests and a gap, read through
    the cache while it grows (children first, their parents in the next look): every look equals a cold
    read, cycles counted, warnings and tokens included."""
    from lens_rl.offline.run.cache import cache_folder

    run = tmp_path / "r1"
    looped = span("reward", 1, 2, "self", bucket="overhead")
    looped["p"] = span_id("self")
    request = span("llm_request", 31, 33, "q", parent="g", **{"gen_ai.usage.completion_tokens": 64})
    request["sc"] = "vllm"
    children = [
        looped,
        span("generation", 1, 10, "p", parent="u", bucket="productive"),
        request,
        span("backward", 41, 41.3, "b", parent="cl", bucket="productive", step=9),
        span("compute_loss", 40.5, 41.5, "cl", parent="ts", step=9),
    ]
    parents = [
        span("step", 1, 10, "u", parent="p", step=7),
        span("generation", 30, 38, "g", parent="s8", bucket="productive", step=8),
        span("step", 30, 40, "s8", parent="job", step=8),
        span("training_step", 40.2, 41.8, "ts", parent="tr", step=9),
        span("train", 40, 42, "tr", parent="job", step=9),
    ]
    path = _driver(run, children, end=50)
    paths = span_files(run)

    def same() -> dict[str, Any]:
        warm = analyze(paths, jobs=1, cache=cache_folder(run))
        cold = json.loads(json.dumps(analyze(paths, jobs=1), default=str))
        assert json.dumps(warm, sort_keys=True) == json.dumps(cold, sort_keys=True)
        return warm

    same()
    with path.open("a") as handle:
        handle.write("".join(json.dumps(s) + "\n" for s in parents))
    report = same()
    assert report["broken_cycles"] == 2
    assert {r["step"] for r in report["steps"]} == {7, 8, 9}
    assert next(r for r in report["phases"] if r["phase"] == "generation" and r["tokens_per_s"])["tokens_per_s"]
    assert any(w["kind"] == "unattributed" for w in report["warnings"])
    assert same() == report  # an unchanged store, answered from the cache


@pytest.mark.timeout(60)
def test_vllm_requests_in_their_own_file_give_the_calling_phase_its_tokens(tmp_path: Path) -> None:
    """vLLM's requests written to a file of their own (a vLLM process's, as the loopback receiver writes them),
    each a child of the worker's generation phase in another file: the job's goodput and steps are unchanged,
    no request is a phase, the vLLM process adds no idle process to its group, and the generation phase's
    tokens/s and each step's tokens come from them."""

    def job(run: Path, with_requests: bool) -> Path:
        driver, worker, requests = [], [], []
        for i in range(2):
            t = 1 + 20 * i
            driver += [
                span("generation", t, t + 10, f"dg{i}", parent=f"u{i}", bucket="productive", step=i),
                span("step", t, t + 16, f"u{i}", parent="job", step=i),
            ]
            worker.append(span("generation", t, t + 10, f"wg{i}", parent=f"dg{i}", remote=True, step=i))
            worker[-1]["a"]["rl.bucket"] = "productive"
            requests += _requests(t, f"wg{i}", f"q{i}", remote=True)
        _driver(run, driver, end=45)
        write_process(run, "rollout", 0, 5, worker)
        if with_requests:
            write_process(run, "rollout", 0, 6, requests, name="spans-rollout-0-6-vllm.jsonl")
        return run

    bare = analyze(span_files(job(tmp_path / "bare", False)), jobs=1)
    report = analyze(span_files(job(tmp_path / "vllm", True)), jobs=1)
    assert report["goodput"] == bare["goodput"] and report["job"] == bare["job"]
    assert [r["wall_s"] for r in report["steps"]] == [r["wall_s"] for r in bare["steps"]]
    assert [r["tokens"] for r in report["steps"]] == [400, 400]
    assert "llm_request" not in json.dumps(report["phases"]) and report["unbucketed_phases"] == []
    rollout = next(r for r in report["phases"] if r["worker_group"] == "rollout" and r["phase"] == "generation")
    assert rollout["tokens_per_s"] == pytest.approx(40.0)  # 400 tokens over each 10 s generation
    assert next(r for r in bare["phases"] if r["worker_group"] == "rollout")["tokens_per_s"] is None
    # the vLLM process is no resource of its own: its group's and ranks' seconds are the caller's alone
    assert report["worker_groups"] == bare["worker_groups"] and report["ranks"] == bare["ranks"]
    assert report["pipeline"] == bare["pipeline"]  # (its rank's pid the worker's, not the vLLM process's)
    from lens_rl.offline.run.cache import cache_folder

    warm = analyze(span_files(tmp_path / "vllm"), jobs=1, cache=cache_folder(tmp_path / "vllm"))
    assert warm["phases"] == report["phases"] and warm["steps"] == report["steps"]


def _vllm_file(run: Path, pid: int, kind: str, spans: list[dict[str, Any]]) -> None:
    """A vLLM process's file as the loopback receiver writes it for a driver that started the engine: the
    caller's group and rank, ``"role": "worker"``, vLLM's service name and ``vllm.process_kind``."""
    head = header("driver", 0, pid, **{"service.name": "lens-rl-vllm", "vllm.process_kind": kind})
    head["role"] = "worker"
    lines = [head, *spans]
    (run / f"spans-driver-0-vllm-{kind}-{pid}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def _served_job(run: Path, *, steps: int = 3, vllm: bool = True) -> list[Path]:
    """The OpenAI server's shape (as a real vLLM writes it): the driver's 10 s ``generate`` phases (each a whole
    step), each sending two requests through ``instrument_aiohttp_client`` (a CLIENT span, another library's
    scope, under the phase); the vLLM front-end's file with each ``llm_request`` (6 completion, 3 prompt tokens)
    a remote child of its CLIENT span; the engine core's with its start-up span under the job root. Returns
    the driver's file and the front-end's."""
    driver, requests = [], []
    for i in range(steps):
        t = 1 + 10 * i
        driver += [
            span("generate", t, t + 10, f"g{i}", parent=f"u{i}", bucket="productive", step=i),
            span("step", t, t + 10, f"u{i}", parent="job", step=i),
        ]
        for k in range(2):
            client = span("POST", t + 1, t + 9, f"c{i}-{k}", parent=f"g{i}", **{"http.method": "POST"})
            client.update(k="CLIENT", sc="opentelemetry.instrumentation.aiohttp_client")
            driver.append(client)
            request = span(
                "llm_request",
                t + 2,
                t + 8,
                f"q{i}-{k}",
                parent=f"c{i}-{k}",
                remote=True,
                **{"gen_ai.latency.e2e": 6.0, "gen_ai.usage.completion_tokens": 6, "gen_ai.usage.prompt_tokens": 3},
            )
            request.update(k="SERVER", sc="vllm.tracing.otel")
            requests.append(request)
    path = _driver(run, driver, end=10 * steps + 2)
    if not vllm:
        return [path]
    loading = span("Overall Loading", 0.5, 0.9, "load", parent="job", remote=True)
    loading["sc"] = "vllm.v1.engine.core_client"
    _vllm_file(run, 7002, "engine-core", [loading])
    _vllm_file(run, 7001, "front-end", requests)
    return [path, run / "spans-driver-0-vllm-front-end-7001.jsonl"]


@pytest.mark.timeout(60)
def test_the_servers_requests_give_their_tokens_to_the_phase_that_sent_them(tmp_path: Path) -> None:
    """The OpenAI server's shape: each request a remote child of an aiohttp CLIENT span (another library's, in
    the caller's file) under the ``generate`` phase, in a vLLM process's file. The phase's tokens/s, each
    step's tokens and the run's come from the requests, cold and through the refresh cache alike (the caller's
    file read before the requests' file was written)."""
    from lens_rl.offline.run.cache import cache_folder

    run = tmp_path / "served"
    _, front = _served_job(run)
    front.rename(tmp_path / "later.jsonl")  # (a first look at the store before vLLM's requests are written)
    analyze(span_files(run), jobs=1, cache=cache_folder(run))
    (tmp_path / "later.jsonl").rename(front)
    report = analyze(span_files(run), jobs=1)
    generate = next(r for r in report["phases"] if r["phase"] == "generate")
    assert generate["tokens_per_s"] == pytest.approx(12 / 10)  # two requests of 6 tokens in each 10 s phase
    assert [r["tokens"] for r in report["steps"]] == [12, 12, 12]
    assert report["throughput"]["tokens"] == 36
    assert report["requests"][0]["output_tokens"] == 36
    warm = analyze(span_files(run), jobs=1, cache=cache_folder(run))
    assert json.dumps(warm, sort_keys=True, default=str) == json.dumps(report, sort_keys=True, default=str)


@pytest.mark.timeout(60)
def test_a_driver_running_vllm_is_one_rank_of_its_pool(tmp_path: Path) -> None:
    """A driver that runs vLLM itself: its vLLM processes' files (the caller's group and rank, as a worker's)
    are its rank's, as in the ranks table: the pipeline has the one rank, busy for each whole step (each step
    is its productive ``generate`` phase), as without them."""
    _served_job(tmp_path / "bare", vllm=False)
    _served_job(tmp_path / "served")
    bare = analyze(span_files(tmp_path / "bare"), jobs=1)
    report = analyze(span_files(tmp_path / "served"), jobs=1)
    assert len(report["ranks"]) == 1
    (pool,) = report["pipeline"]["pools"]
    assert pool["pool"] == "rollout" and [r["pid"] for r in pool["ranks"]] == [1]
    assert pool["busy"] == pytest.approx(1.0)
    assert [r["busy"] for r in report["pipeline"]["per_step"]] == [{"rollout": 1.0}] * 3
    assert report["pipeline"] == bare["pipeline"]


@pytest.mark.timeout(30)
def test_odd_step_values_are_read_alike_by_every_command(tmp_path: Path) -> None:
    """A step that is a list, an object or an int past 64 bits is no step in any command: its span takes its
    parent's step, in goodput as in Perfetto --steps and the report's timeline."""
    run = tmp_path / "r1"
    _driver(
        run,
        [
            span("a", 1, 2, "a", parent="u", bucket="productive", step=[1]),
            span("b", 2, 3, "b", parent="u", bucket="productive", step={"x": 1}),
            span("c", 3, 4, "c", parent="u", bucket="productive", step=2**70),
            span("step", 1, 5, "u", parent="job", step=4),
        ],
    )
    _every_command(run, tmp_path)
    assert set(_rows_steps(run / "spans-driver-0-1.jsonl").values()) == {None, 4}


def test_a_tree_resolved_a_level_at_a_time_is_resolved_as_a_span_at_a_time() -> None:
    """A shallow tree with no cycle (most files) is resolved a level at a time: every span's step, bucketed
    ancestor, outermost span with a step and place come out as the span-at-a-time rule gives them."""
    import random
    from array import array

    from lens_rl.offline.read import tree as rule

    rng = random.Random(11)
    for trial in range(60):
        n = rng.randrange(rule._LEVELS_FROM, rule._LEVELS_FROM + 200)
        ups = array("q", [-1 if i == 0 or rng.random() < 0.2 else rng.randrange(0, i) for i in range(n)])
        order = list(range(n))
        rng.shuffle(order)  # (children before parents, as files often hold them)
        where = {old: new for new, old in enumerate(order)}
        parents = array("q", [-1] * n)
        for new, old in enumerate(order):
            parents[new] = -1 if ups[old] == -1 else where[ups[old]]
        own = [rng.choice([None, None, 1, 2, "warmup", 2.5, True]) for _ in range(n)]
        buckets = [rng.choice([None, None, "productive", "idle"]) for _ in range(n)]
        names = [rng.choice(["a", "b", "rl.job"]) for _ in range(n)]
        third = rng.choice(
            [None, bytearray(rng.random() < 0.1 for _ in range(n)), [rng.random() < 0.1 for _ in range(n)]]
        )
        levels = rule._levels(parents)
        if levels is None:  # (deeper than resolved by levels: not this test's case)
            continue
        assert (
            rule._by_levels(parents, levels, own, buckets, names, third)
            == rule._in_order(array("q", parents), own, buckets, names, third)[:4]
        ), trial
    cyclic = array("q", [1, 0] + [-1] * rule._LEVELS_FROM)
    assert (
        rule._levels(cyclic) is None
        and resolve(cyclic, [None] * len(cyclic), [None] * len(cyclic), ["x"] * len(cyclic)).cycles == 1
    )
