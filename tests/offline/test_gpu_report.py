"""The report page's GPU lane per rank under the timeline (busy % on the timeline's axis, blank where no
reading), the GPU warnings on the page, and a page built again when a sample file grew."""

from __future__ import annotations

from pathlib import Path

from lens_rl.offline.run.gpu import LANE_BINS
from lens_rl.offline.run.timeline import page_data
from lens_rl.store import span_files
from tests.conftest import lens
from tests.gpu_stores import util_at, write_scripted_job
from tests.stores import EPOCH_NS


def test_each_gpu_rank_of_the_timeline_gets_a_lane_of_its_busy_percent(tmp_path: Path) -> None:
    """Each GPU rank drawn in the timeline has a lane whose stretches read the script's busy % (away from the
    changes, within a sample period of which they hold), on the timeline's ms axis; the driver (no GPU) none."""
    run = write_scripted_job(tmp_path / "r1")
    data = page_data(span_files(run), jobs=1)
    lanes = {lane["process"]: lane for lane in data.gpu_lanes}
    assert set(lanes) == {"actor rank 0 (pid 10)", "actor rank 1 (pid 11)"}
    origin_s = (min(s["start"] for s in data.timeline) - EPOCH_NS) / 1e9
    lane = lanes["actor rank 0 (pid 10)"]
    assert len(lane["busy"]) == LANE_BINS and lane["devices"] == ["GPU-0"]
    width_s = (lane["ms"][1] - lane["ms"][0]) / 1e3
    checked = 0
    for ms, busy in zip(lane["ms"], lane["busy"], strict=True):
        at = origin_s + ms / 1e3
        around = {util_at(at + d) for d in (-0.6, 0, width_s / 2, width_s + 0.6)}
        if len(around) == 1:  # (a stretch well away from a change: the script's value)
            assert busy == around.pop()
            checked += 1
    assert checked > LANE_BINS // 4


def test_the_page_shows_the_lanes_and_the_gpu_warnings_and_none_without_samples(tmp_path: Path) -> None:
    """``lens-rl report`` draws the GPU lanes and says the GPU warnings; a run without samples has neither."""
    run = write_scripted_job(tmp_path / "r1")
    assert lens("report", str(run), "-o", str(tmp_path / "a.html")).returncode == 0
    page = (tmp_path / "a.html").read_text()
    assert "GPU busy per rank" in page and "every GPU of actor read idle between generation and training" in page
    bare = write_scripted_job(tmp_path / "b" / "r1", samples=False)
    assert lens("report", str(bare), "-o", str(tmp_path / "b.html")).returncode == 0
    assert "GPU busy per rank" not in (tmp_path / "b.html").read_text()


def test_a_page_is_built_again_when_a_sample_file_grew(tmp_path: Path) -> None:
    """The page kept for an unchanged store is not reused once a sample file grew: the new samples show (the
    page is the one built with no cache)."""
    run = write_scripted_job(tmp_path / "r1")
    out = tmp_path / "a.html"
    path = run / "gpu-node0-100.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:25]))  # (node0's samples up to 12 s: its training, 14-19 s, not sampled yet)
    assert lens("report", str(run), "-o", str(out)).returncode == 0
    first = out.read_text()
    with path.open("a") as handle:
        handle.write("".join(lines[25:]))
    assert lens("report", str(run), "-o", str(out)).returncode == 0
    grown = out.read_text()
    assert grown != first
    assert lens("report", str(run), "-o", str(out), "--no-cache").returncode == 0
    assert out.read_text() == grown
