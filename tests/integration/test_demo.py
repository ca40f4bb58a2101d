"""The README's first command: `lens-rl demo` end to end on a real local Ray cluster, and its report in a
real headless browser."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.browser import browser
from tests.conftest import clean_env

pytest.importorskip("ray")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One demo run for the module: its output, run folder and `lens-rl goodput --json`. The trace dir comes
    from the environment, as under `lens-rl run --trace-dir`, and wins over the demo's ``--trace-dir``: the
    demo reads back where its spans went."""
    trace_dir = tmp_path_factory.mktemp("demo")
    t0 = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "lens_rl", "demo", "--steps", "3", "--trace-dir", str(trace_dir / "not-here")],
        capture_output=True,
        text=True,
        env={**clean_env(), "LENS_RL_OTEL_TRACE_DIR": str(trace_dir)},
        cwd=trace_dir,
        timeout=240,
    )
    elapsed_s = time.monotonic() - t0
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    (run_dir,) = [p for p in trace_dir.iterdir() if p.is_dir()]  # (no "not-here" folder)
    report = json.loads(
        subprocess.run(
            [sys.executable, "-m", "lens_rl", "goodput", str(trace_dir), "--json"],
            capture_output=True,
            text=True,
            env=clean_env(),
        ).stdout
    )
    return {"out": out, "elapsed_s": elapsed_s, "run_dir": run_dir, "report": report}


def test_demo_runs_traces_and_prints_goodput(demo: dict[str, Any]) -> None:
    """The demo finishes in well under two minutes, prints a line per step (with its live goodput), the table
    with both headline figures and a phase breakdown, and where the trace and the report are."""
    out = demo["out"]
    assert demo["elapsed_s"] < 120  # ~20 s here; wide headroom for a busy machine
    assert "step 1/3" in out.stdout and "step 3/3" in out.stdout and "live step goodput" in out.stdout
    assert "steady state" in out.stdout and "tokens/s" in out.stdout
    assert "workers 4/4 flushed" in out.stdout and "report:" in out.stdout
    assert (demo["run_dir"] / "trace.perfetto.json").exists() and (demo["run_dir"] / "report.html").exists()
    report = demo["report"]
    groups = {g["worker_group"] for g in report["worker_groups"]}
    assert groups == {"driver", "lm_policy", "vllm_policy", "rollout_server"}
    assert report["job"]["seconds"]["wasted"] > 0 and report["job"]["seconds"]["idle"] > 0
    assert 0 < report["goodput"] < report["steady_state_goodput"] < 1  # start-up weighs on the headline only
    vllm = next(g for g in report["worker_groups"] if g["worker_group"] == "vllm_policy")
    assert vllm["seconds"]["wasted"] > 0 and vllm["seconds"]["overhead"] > 0  # carried from the driver's scopes
    gens = {
        p["worker_group"]: p for p in report["phases"] if p["phase"] == "generation" and p["bucket"] == "productive"
    }
    assert set(gens) == {"driver", "vllm_policy"}  # every group's phases: the worker's, with the tokens it recorded
    assert gens["vllm_policy"]["tokens_per_s"] > 0 and gens["driver"]["tokens_per_s"] is None


def _external_references(html: str) -> list[str]:
    """Attributes of the page's elements that point at http(s) (script text is not an element)."""
    from html.parser import HTMLParser

    found: list[str] = []

    class Refs(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            for name, value in attrs:
                if (
                    value
                    and re.match(r"\s*(https?:)?//", value)
                    and name in ("src", "href", "xlink:href", "action", "poster", "data")
                ):
                    found.append(f"<{tag} {name}={value}>")
                if value and name == "style" and re.search(r"url\(\s*['\"]?https?:", value):
                    found.append(f"<{tag} style={value}>")

    Refs().feed(html)
    return found


def test_the_report_renders_offline_in_a_real_browser(demo: dict[str, Any], tmp_path: Path) -> None:
    """Headless Chromium draws the demo's report from a file: no console error, no http(s) reference, the
    charts drawn, the screenshot not blank, and the headline figures those of `lens-rl goodput --json`."""
    page = demo["run_dir"] / "report.html"
    assert page.stat().st_size < 10_000_000
    url = page.resolve().as_uri()
    dom = browser(url, "--dump-dom", profile=tmp_path / "p1")
    assert dom.returncode == 0, dom.stderr[-2000:]
    errors = [line for line in dom.stderr.splitlines() if "CONSOLE" in line and re.search(r"Uncaught|Error", line)]
    assert errors == []
    assert not re.search(r"Failed to load resource|net::ERR_", dom.stderr)
    html = dom.stdout
    assert _external_references(html) == []
    assert html.count('class="main-svg"') >= 5  # plotly drew its charts (svg)
    for name in ("goodput-per-step", "bucket-seconds-per-step", "seconds-per-rank", "stragglers-lm_policy", "timeline"):
        assert f'id="{name}"' in html
    report = demo["report"]
    headline = re.search(r'id="headline-goodput">[^<]*<b>([^<]+)</b>', html)
    steady = re.search(r'id="headline-steady">[^<]*<b>([^<]+)</b>', html)
    assert headline and headline.group(1) == f"{report['goodput'] * 100:.1f}%"
    assert steady and steady.group(1) == f"{report['steady_state_goodput'] * 100:.1f}%"

    shot = tmp_path / "report.png"
    res = browser(url, f"--screenshot={shot}", profile=tmp_path / "p2", window="1400,2400")
    assert res.returncode == 0 and shot.exists(), res.stderr[-2000:]
    from PIL import Image

    with Image.open(shot) as image:
        colors = image.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colors is not None and len(colors) > 50  # charts, not a blank page
