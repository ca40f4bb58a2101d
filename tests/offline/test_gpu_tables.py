"""The report page's GPU block: the GPU goodput card beside the clock's, the GPU tables by phase and rank with the
goodput table's figures, the devices with no reading, and nothing for a run without GPU samples."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from lens_rl.offline.show.formats import percent
from lens_rl.offline.show.gpu_table import GPU_RANK_ROWS, cells, shown_ranks
from lens_rl.offline.show.report.gpu_tables import MAX_PHASE_ROWS, gpu_card, gpu_section
from tests.conftest import lens
from tests.gpu_stores import device, scripted_reading, write_samples, write_scripted_job


def _goodput(run: Path) -> Any:
    return json.loads(lens("goodput", str(run), "--json", "--no-cache").stdout)


def test_the_page_shows_gpu_goodput_beside_the_clocks_and_the_gpu_tables(tmp_path: Path) -> None:
    """``lens-rl report`` of a run with samples: a GPU goodput card right after the clock's, each phase's and each
    rank's GPU figures as the goodput table prints them; a run without samples has neither."""
    run = write_scripted_job(tmp_path / "r1")
    report = _goodput(run)
    assert lens("report", str(run), "-o", str(tmp_path / "a.html"), "--no-cache").returncode == 0
    page = (tmp_path / "a.html").read_text()
    clock, card = page.index('id="headline-goodput"'), page.index('id="headline-gpu-goodput"')
    assert clock < card < page.index('id="headline-steady"')
    assert f"<b>{percent(report['gpu']['goodput']['goodput'])}</b>" in page[card : card + 200]
    section = page[page.index('<section id="gpu">') :]
    for row in report["gpu"]["phases"]:
        first = [row["phase"], row["worker_group"], row["bucket"], f"{row['total_s']:.2f}"]
        assert "".join(f"<td>{html.escape(str(c))}</td>" for c in (*first, *cells(row))) in section
    for row in report["gpu"]["ranks"]:
        assert f"<td>{row['worker_group']} rank {row['rank']}</td><td>{row['devices'][0]}</td>" in section
    bare = write_scripted_job(tmp_path / "b" / "r1", samples=False)
    assert lens("report", str(bare), "-o", str(tmp_path / "b.html")).returncode == 0
    plain = (tmp_path / "b.html").read_text()
    assert "headline-gpu-goodput" not in plain and '<section id="gpu">' not in plain


def test_no_reading_shows_unavailable_and_the_device_is_named(tmp_path: Path) -> None:
    """A device without a utilisation counter reads ``unavailable`` in the page's GPU tables (never 0 %) and is
    listed with why."""
    run = write_scripted_job(tmp_path / "r1", samples=False)
    blind = device("GPU-0", has=["mem_used", "power"])
    write_samples(run, "node0", 100, [blind], scripted_reading)
    write_samples(run, "node1", 101, [device("GPU-1")], scripted_reading)
    section = gpu_section(_goodput(run))
    assert "<td>unavailable</td>" in section
    assert "<li>GPU GPU-0 on node0: no utilisation reading</li>" in section


def test_without_gpu_samples_the_block_is_empty_and_many_rows_are_cut() -> None:
    """No ``gpu`` section: no card, no section. Past :data:`GPU_RANK_ROWS` ranks, the rank table keeps the least
    busy ones and says so; past :data:`MAX_PHASE_ROWS` phases, the page says how many more."""
    assert gpu_card({"gpu": None}) == "" and gpu_section({}) == ""
    figures = {"gpu_idle_s": 1.0, "gpu_idle_share": 0.1, "mem_peak_bytes": 2**30, "sm_active": None}
    ranks = [
        {"worker_group": "actor", "rank": n, "devices": [f"GPU-{n}"], "gpu_busy": n / 100, "tensor_active": None}
        | figures
        for n in range(GPU_RANK_ROWS + 4)
    ]
    shown, note = shown_ranks(ranks)
    assert [r["rank"] for r in shown] == list(range(GPU_RANK_ROWS))
    assert note == f" (the {GPU_RANK_ROWS} least busy of {GPU_RANK_ROWS + 4})"
    phases = [
        {"phase": f"p{n}", "worker_group": "actor", "bucket": "productive", "total_s": 1.0, "gpu_busy": 0.5}
        | figures
        | {"tensor_active": None}
        for n in range(MAX_PHASE_ROWS + 3)
    ]
    report = {"gpu": {"goodput": {"goodput": 0.5, "devices": 20}, "phases": phases, "ranks": ranks, "devices": []}}
    section = gpu_section(report)
    assert html.escape(note) in section and "<td>actor rank 15</td>" in section and "actor rank 16<" not in section
    assert f"<td>p{MAX_PHASE_ROWS - 1}</td>" in section and f"<td>p{MAX_PHASE_ROWS}</td>" not in section
    assert "... 3 more (lens-rl goodput --json)" in section
    assert "GPU goodput (20 GPUs)<b>50.0%</b>" in gpu_card(report)
