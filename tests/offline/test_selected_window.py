"""``lens-rl goodput --steps A-B``: every figure is the selected steps' window's, as if the job had only
those steps: a phase's p95, tokens/s, tokens/s per GPU and MFU, and the GPU section (phases, ranks, steps,
the GPU goodput), never null where the whole job's has a value; the refresh cache answers as ``--no-cache``,
and a second range is not answered with the first's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import lens
from tests.gpu_stores import device, write_samples
from tests.stores import span, write_process

#: the trainer's resource: 2 GPUs of a known peak, a model of 1e9 parameters (train: 6N FLOPs a token)
TRAINER = {"rl.num_gpus": 2, "rl.device.name": "NVIDIA H100 80GB HBM3", "rl.model.num_params": 1e9}


def _store(run: Path, steps: range = range(1, 5)) -> None:
    """Per step k: the driver's 10 s umbrella (generate k s, train 3 s); the trainer's train k s of 100 k
    tokens; a start-up phase outside every step."""
    driver = [span("setup", 0, 1, "su", bucket="overhead")]
    trainer = [span("load", 0, 2, "ld", bucket="overhead")]
    for k in steps:
        t = 10 * k
        driver.append(span("step", t, t + 10, f"s{k}", step=k))
        driver.append(span("generate", t, t + k, f"g{k}", bucket="productive", parent=f"s{k}"))
        driver.append(span("train", t + 5, t + 8, f"t{k}", bucket="productive", parent=f"s{k}"))
        trainer.append(
            span("train", t + 1, t + 1 + k, f"wt{k}", bucket="productive", step=k, **{"rl.num_tokens": 100 * k})
        )
    write_process(run, "driver", 0, 1, driver)
    write_process(run, "trainer", 0, 2, trainer, **TRAINER)


def _goodput(root: Path, *extra: str) -> str:
    out = lens("goodput", str(root), *extra)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def _phase(rows: list[Any], group: str, name: str) -> Any:
    return next(p for p in rows if p["worker_group"] == group and p["phase"] == name)


def test_a_phases_p95_token_rates_and_mfu_are_the_selected_steps(tmp_path: Path) -> None:
    """--steps 2-3: the trainer's train p95 is 3 s (its spans of 2 and 3 s), 500 tokens in 5 s: 100 tokens/s,
    50 per GPU, MFU 500 x 6e9 / (5 s x 2 GPUs x 989 TFLOP/s); as the whole job of a store of steps 2-3 alone
    says them; the cache answers as --no-cache."""
    _store(tmp_path / "a" / "r")
    cold = _goodput(tmp_path / "a", "--json", "--steps", "2-3", "--no-cache")
    assert _goodput(tmp_path / "a", "--json", "--steps", "2-3") == cold  # (the cache made)
    assert _goodput(tmp_path / "a", "--json", "--steps", "2-3") == cold  # (and read)
    train = _phase(json.loads(cold)["phases"], "trainer", "train")
    assert train["count"] == 2 and train["p95_s"] == 3.0
    assert train["tokens_per_s"] == 100.0 and train["tokens_per_s_per_gpu"] == 50.0
    assert train["mfu"] == round(500 * 6e9 / (5 * 2 * 989e12), 6)
    generate = _phase(json.loads(cold)["phases"], "driver", "generate")
    assert generate["p95_s"] == 3.0  # (the driver's spans of steps 2 and 3: 2 s and 3 s)
    _store(tmp_path / "b" / "r", range(2, 4))
    alone = _phase(json.loads(_goodput(tmp_path / "b", "--json", "--no-cache"))["phases"], "trainer", "train")
    for key in ("count", "total_s", "p95_s", "tokens_per_s", "tokens_per_s_per_gpu", "mfu"):
        assert train[key] == alone[key], key


def test_another_range_through_the_cache_is_its_own_answer(tmp_path: Path) -> None:
    """--steps 2-3 then --steps 4-4 through the cache: the second is step 4's (p95 4 s, 100 tokens/s), as
    --no-cache says it, never the first's."""
    _store(tmp_path / "r")
    _goodput(tmp_path, "--json", "--steps", "2-3")
    warm = _goodput(tmp_path, "--json", "--steps", "4-4")
    assert warm == _goodput(tmp_path, "--json", "--steps", "4-4", "--no-cache")
    train = _phase(json.loads(warm)["phases"], "trainer", "train")
    assert (train["count"], train["p95_s"], train["tokens_per_s"]) == (1, 4.0, 100.0)


def test_the_table_shows_the_selected_steps_p95(tmp_path: Path) -> None:
    """The table's phase rows under --steps 2-3 carry the p95 of those steps (3.000 s for the trainer's train),
    as --json does."""
    _store(tmp_path / "r")
    table = _goodput(tmp_path, "--steps", "2-3")
    row = next(line for line in table.splitlines() if line.split()[:2] == ["train", "trainer"])
    assert row.split()[7] == "3.000s" and row.split()[-1] == "100", row


#: per step k (1, 2): the GPU reads 80 % in step 1's generation and 40 % in step 2's
def _util(t: float) -> float:
    if 1 <= t < 9:
        return 80
    if 11 <= t < 19:
        return 40
    return 0


def _gpu_store(run: Path, steps: tuple[int, ...] = (1, 2)) -> None:
    """A driver of two 10 s steps and one GPU worker generating 8 s of each (80 % busy, then 40 %); ``steps``:
    the steps whose spans are written (the samples are the same)."""
    driver = [span("rl.job", 0, 20, "job")]
    worker = []
    for k in steps:
        t = 10 * (k - 1)
        driver.append(span("step", t, t + 10, f"s{k}", parent="job", step=k))
        worker.append(span("generation", t + 1, t + 9, f"g{k}", bucket="productive", step=k))
    write_process(run, "driver", 0, 1, driver, root="job")
    write_process(run, "actor", 0, 10, worker, **{"rl.gpu.uuids": ["GPU-0"], "host.name": "node0"})

    def reading(t: float) -> list[Any]:
        u = _util(t)
        return [[u, u // 2, int(1e9 + 1e7 * u), 150000, 1980, None, None, None]]

    write_samples(run, "node0", 100, [device("GPU-0")], reading, hz=4.0)


def test_the_gpu_section_covers_the_selected_steps(tmp_path: Path) -> None:
    """--steps 2-2: the GPU phase, rank and step rows are those of a store holding step 2's spans alone
    (about 40 % busy; the job's read about 60 %), the GPU goodput is step 2's busy productive seconds (8 s at
    about 40 %) over its 10 s; the cache answers as --no-cache; --steps 1-1 then reads about 80 %."""
    _gpu_store(tmp_path / "a" / "r")
    whole = json.loads(_goodput(tmp_path / "a", "--json", "--no-cache"))["gpu"]
    assert _phase(whole["phases"], "actor", "generation")["gpu_busy"] == pytest.approx(0.6, abs=0.02)
    cold = _goodput(tmp_path / "a", "--json", "--steps", "2-2", "--no-cache")
    assert _goodput(tmp_path / "a", "--json", "--steps", "2-2") == cold  # (the cache made)
    assert _goodput(tmp_path / "a", "--json", "--steps", "2-2") == cold  # (and read)
    gpu = json.loads(cold)["gpu"]
    _gpu_store(tmp_path / "b" / "r", (2,))
    alone = json.loads(_goodput(tmp_path / "b", "--json", "--no-cache"))["gpu"]
    assert gpu["phases"] == alone["phases"] and gpu["ranks"] == alone["ranks"] and gpu["steps"] == alone["steps"]
    generation = _phase(gpu["phases"], "actor", "generation")
    assert (generation["count"], generation["total_s"]) == (1, 8.0)
    assert generation["gpu_busy"] == pytest.approx(0.4, abs=0.02) and [r["step"] for r in gpu["steps"]] == [2]
    (dev,) = gpu["devices"]  # (over step 2's 10 s: 8 s at about 40 %)
    assert dev["gpu_measured_s"] == pytest.approx(10.0, abs=0.25) and dev["gpu_busy"] == pytest.approx(
        8 * 0.4 / 10, abs=0.02
    )
    assert dev["mem_peak_bytes"] < 1.8e9  # (step 1's 80 % read 1.8 GB; step 2's 40 %, 1.4 GB)
    good = gpu["goodput"]
    assert good["gpu_s"] == 10.0 and good["goodput"] == pytest.approx(8 * 0.4 / 10, abs=0.02)
    first = json.loads(_goodput(tmp_path / "a", "--json", "--steps", "1-1"))["gpu"]
    assert _phase(first["phases"], "actor", "generation")["gpu_busy"] == pytest.approx(0.8, abs=0.02)
    assert first["goodput"]["goodput"] == pytest.approx(8 * 0.8 / 10, abs=0.02)


def test_unbucketed_phases_cover_the_selected_steps(tmp_path: Path) -> None:
    """An unbucketed leaf (``wait``, 6 s) in step 4 alone: named at 60 % of step 4's wall under --steps 4-4,
    not named under --steps 2-3 (none of it there), as the whole job names it at 6 of its steps' 40 s."""
    run = tmp_path / "r"
    _store(run)
    driver = json.loads((run / "spans-driver-0-1.jsonl").read_text().splitlines()[0])
    lines = (run / "spans-driver-0-1.jsonl").read_text().splitlines()
    lines.append(json.dumps(span("wait", 43, 49, "w4", parent="s4")))
    (run / "spans-driver-0-1.jsonl").write_text("\n".join(lines) + "\n")
    assert driver["header"]
    whole = json.loads(_goodput(tmp_path, "--json", "--no-cache"))["unbucketed_phases"]
    assert [(u["phase"], u["share"]) for u in whole] == [("wait", 0.15)]
    last = json.loads(_goodput(tmp_path, "--json", "--steps", "4-4"))["unbucketed_phases"]
    assert [(u["phase"], u["total_s"], u["share"]) for u in last] == [("wait", 6.0, 0.6)]
    assert json.loads(_goodput(tmp_path, "--json", "--steps", "2-3"))["unbucketed_phases"] == []


def test_the_critical_paths_exposed_share_is_of_the_selected_steps_time(tmp_path: Path) -> None:
    """--steps 2-3: the driver's train is on the path all its 6 s in those steps: exposed 100 % (of its 6 s
    there, not of the job's 12 s), as a store of steps 2-3 alone says; the cache answers as --no-cache."""
    _store(tmp_path / "a" / "r")
    _store(tmp_path / "b" / "r", range(2, 4))
    cold = _goodput(tmp_path / "a", "--json", "--steps", "2-3", "--no-cache")
    assert _goodput(tmp_path / "a", "--json", "--steps", "2-3") == cold
    picked = json.loads(cold)["critical_path"]
    alone = json.loads(_goodput(tmp_path / "b", "--json", "--no-cache"))["critical_path"]
    train = _phase(picked["phases"], "driver", "train")
    assert (train["critical_s"], train["exposed_share"]) == (6.0, 1.0)
    assert picked["phases"] == alone["phases"] and picked["steps"] == alone["steps"]


def test_tokens_a_vllm_server_gave_a_phase_count_in_their_step(tmp_path: Path) -> None:
    """The driver's generate phase has no token count of its own; vLLM's requests under it give it 1,000 tokens
    in step 1 and 500 in step 2 (10 s each): --steps 2-2 reads 50 tokens/s, --steps 1-1 100, through the cache
    as --no-cache."""
    from tests.offline.test_requests import _request

    run = tmp_path / "r"
    driver = [span("rl.job", 0, 25, "job")]
    requests = []
    for k, count in ((1, 20), (2, 10)):
        t = 12 * (k - 1)
        driver.append(span("step", t, t + 11, f"s{k}", parent="job", step=k))
        driver.append(span("generate", t, t + 10, f"g{k}", parent=f"s{k}", bucket="productive"))
        requests += [_request(f"r{k}-{i}", t + i * 0.4, 0.4, 0.01, 0.1, 50, f"g{k}") for i in range(count)]
    write_process(run, "driver", 0, 1, driver, root="job", role="driver")
    write_process(
        run, "gen", 0, 2, requests, name="spans-gen-0-vllm-front-end-2.jsonl", **{"vllm.process_kind": "front-end"}
    )
    for window, rate in (("2-2", 50.0), ("1-1", 100.0)):
        cold = _goodput(tmp_path, "--json", "--steps", window, "--no-cache")
        assert _goodput(tmp_path, "--json", "--steps", window) == cold
        assert _phase(json.loads(cold)["phases"], "driver", "generate")["tokens_per_s"] == rate, window


def test_the_unattributed_warning_says_its_place_is_the_whole_jobs(tmp_path: Path) -> None:
    """--steps 2-3: the unattributed share is those steps' (9 s of 20 s), and the message says where most of
    it falls is over the whole job (the gaps are not kept per step), as ``selection.job_wide`` does."""
    _store(tmp_path / "r")
    report = json.loads(_goodput(tmp_path, "--json", "--steps", "2-3"))
    (warning,) = [w for w in report["warnings"] if w["kind"] == "unattributed"]
    assert warning["share"] == 0.45 and "; over the whole job, most of it" in warning["message"]
    assert "warnings.unattributed.between" in report["selection"]["job_wide"]
    whole = json.loads(_goodput(tmp_path, "--json"))
    assert "over the whole job" not in next(w for w in whole["warnings"] if w["kind"] == "unattributed")["message"]
