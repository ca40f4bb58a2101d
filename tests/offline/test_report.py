"""The HTML report reads right at any size: the heatmap's fixed scale, the timeline's window and umbrellas,
identity from headers, and a 2,000-rank run's page height measured in a real headless browser."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lens_rl.offline.show.report import HEAT_LIMIT, build_report
from lens_rl.store import span_files
from tests.browser import browser
from tests.stores import span, write_process

pytest.importorskip("plotly")


def figures(page: str) -> dict[str, dict[str, Any]]:
    """Each chart's plotly figure ({"data", "layout"}) by its section id, parsed from the page."""
    out = {}
    decoder = json.JSONDecoder()
    for match in re.finditer(r'<section id="([^"]+)">.*?Plotly\.newPlot\(\s*"[^"]+",\s*', page, re.S):
        data, end = decoder.raw_decode(page, match.end())
        layout, _ = decoder.raw_decode(page, page.index("{", end))
        out[match.group(1)] = {"data": data, "layout": layout}
    return out


def _run(run: Path, ranks: int, *, steps: int = 4, slow_rank: int | None = None, noise: float = 0.001) -> Path:
    """A driver with `steps` steps of 10 s (an umbrella over a productive phase) and a group of `ranks`
    ranks each computing ~4 s a step then waiting at a barrier; ``slow_rank`` computes 6 s."""
    rows = [span("rl.job", 0, steps * 10 + 1, "job")]
    for i in range(steps):
        t = 1 + i * 10
        rows += [
            span("step", t, t + 10 + (i == steps - 1), f"s{i}", parent="job", step=i),
            span("policy_training", t, t + 9, f"p{i}", parent=f"s{i}", step=i, bucket="productive"),
        ]
    write_process(run, "driver", 0, 1, rows, root="job")
    for r in range(ranks):
        rows = []
        for i in range(steps):
            t = 1 + i * 10
            compute = 6.0 if r == slow_rank else 4.0 * (1 + noise * (r % 7 - 3))
            rows += [
                span(
                    "policy_training",
                    t,
                    t + compute,
                    f"w{r}-{i}",
                    parent=f"p{i}",
                    remote=True,
                    step=i,
                    bucket="productive",
                ),
                span("barrier", t + compute, t + 9, f"b{r}-{i}", parent=f"p{i}", remote=True, step=i, bucket="idle"),
            ]
        write_process(run, "lm_policy", r, 1000 + r, rows)
    return run


def test_the_heatmap_scale_is_fixed_and_symmetric_around_the_straggler_rule(tmp_path: Path) -> None:
    """Noise of +-0.3 % draws white on a scale fixed at +-100 %, white within +-20 %, with readable ticks."""
    page = build_report(span_files(_run(tmp_path, 8, noise=0.001)), jobs=1)
    heat = figures(page)["stragglers-lm_policy"]["data"][0]
    assert (heat["zmin"], heat["zmax"]) == (-HEAT_LIMIT, HEAT_LIMIT)
    stops = dict((round(at, 3), color) for at, color in heat["colorscale"])
    assert stops[0.4] == stops[0.6] == "#ffffff"  # -20 % .. +20 %: the straggler rule's band is white
    assert max(abs(z) for row in heat["z"] for z in row) < 0.01
    assert heat["colorbar"]["ticktext"] == ["-100%", "-50%", "-20%", "0", "+20%", "+50%", "+100% or more"]


def test_the_timeline_window_holds_only_steps_that_exist_and_umbrellas_lie_under_phases(tmp_path: Path) -> None:
    """The slowest step is the last of four: the window is steps 2-3, not 2-4; the umbrellas' trace is drawn
    first, so phases lie on top of it."""
    page = build_report(span_files(_run(tmp_path, 2)), jobs=1)
    timeline = figures(page)["timeline"]
    assert "steps 2-3 " in timeline["layout"]["title"]["text"]
    assert timeline["data"][0]["name"] == "no bucket (umbrellas)"
    names = {t["name"] for t in timeline["data"][1:]}
    assert names == {"productive", "idle"}


def test_a_timeline_window_asked_past_the_run_holds_only_its_steps(tmp_path: Path) -> None:
    """--steps 2-9 of a run of steps 0-3: the window is steps 2-3, as the default window is clamped."""
    page = build_report(span_files(_run(tmp_path, 2)), steps=(2, 9), jobs=1)
    assert "steps 2-3 " in figures(page)["timeline"]["layout"]["title"]["text"]


def test_identity_comes_from_headers_never_file_names(tmp_path: Path) -> None:
    """Groups named with dashes, a group called driver-pool, a file named any way: the page names them right."""
    write_process(
        tmp_path,
        "driver",
        0,
        1,
        [
            span("rl.job", 0, 10, "job"),
            span("step", 0, 9, "s", parent="job", step=1),
            span("generation", 0, 5, "g", parent="s", step=1, bucket="productive"),
        ],
        root="job",
        name="spans-x.jsonl",
        **{"rl.model.name": "m"},
    )
    for rank in (0, 1):
        write_process(
            tmp_path,
            "lm-policy",
            rank,
            10 + rank,
            [span("train", 1, 4, f"t{rank}", parent="s", remote=True, step=1, bucket="productive")],
        )
    write_process(tmp_path, "driver-pool", 0, 20, [span("train", 1, 2, "d", parent="s", remote=True, step=1)])
    page = build_report(span_files(tmp_path), jobs=1)
    assert "driver x1, driver-pool x1, lm-policy x2" in page and "model m" in page


def test_a_timeline_window_outside_the_run_is_refused(tmp_path: Path) -> None:
    """--steps that select none of the run's steps is a clear error, not an empty chart."""
    with pytest.raises(ValueError, match="selects no step: the run's steps are 0-3"):
        build_report(span_files(_run(tmp_path, 2)), steps=(7, 9), jobs=1)


@pytest.mark.slow
def test_a_2000_rank_run_reads_on_a_few_screens_with_its_straggler_on_top(tmp_path: Path) -> None:
    """2,000 ranks, one straggler: the page (measured in headless Chromium) stays under 15,000 px, the heatmap
    shows the 16 most deviating ranks with the straggler first, and the timeline includes it."""
    run = _run(tmp_path / "run", 2000, steps=6, slow_rank=1234)
    out = subprocess.run(
        [sys.executable, "-m", "lens_rl", "report", str(run), "-o", str(tmp_path / "r.html")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    page = (tmp_path / "r.html").read_text()
    charts = figures(page)
    heat = charts["stragglers-lm_policy"]["data"][0]
    assert len(heat["y"]) == 16 and heat["y"][0] == "rank 1234"
    assert "lm_policy rank 1234 (pid 2234)" in charts["timeline"]["layout"]["yaxis"]["categoryarray"]
    ranks = charts["seconds-per-rank"]["data"][0]["y"]
    assert ranks[0] == "lm_policy: mean of 2000 ranks" and "lm_policy 1234" in ranks and len(ranks) <= 1 + 1 + 16
    probe = tmp_path / "probe.html"  # (the test's own script reads the height; the product has none)
    probe.write_text(
        page.replace(
            "</body>",
            "<script>addEventListener('load', () => setTimeout(() => "
            "{document.title = 'H=' + document.documentElement.scrollHeight}, 300))</script></body>",
        )
    )
    dom = browser(probe.as_uri(), "--dump-dom", profile=tmp_path / "profile")
    height = re.search(r"<title>H=(\d+)</title>", dom.stdout)
    assert height is not None, dom.stderr[-2000:]
    assert 1000 < int(height.group(1)) < 15_000
