"""Throughput and MFU against hand arithmetic (H100 dense BF16 989 TFLOP/s, 6N training and 2N generation
FLOPs per token), end-to-end tokens per GPU per step, never a guess where the model or device is unknown;
degrading ranks when every rank slows alike (and no straggler)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lens_rl.offline.rollup.throughput import peak_tflops
from lens_rl.offline.run.analyze import analyze
from lens_rl.store import span_files
from tests.stores import span, write_process

H100 = 989e12


def _store(run: Path, *, known: bool = True) -> Path:
    """Two steps of 4 s: a 2 s generation (1 M tokens) on a 4-GPU vLLM worker, then 2 s of training (1 M
    tokens) on an 8-GPU trainer; a 1e9-parameter model on H100s (unless ``known`` is False)."""
    model = {"rl.model.num_params": 1e9, "rl.device.name": "NVIDIA H100 80GB HBM3"} if known else {}
    driver = [span("rl.job", 0, 8, "job")]
    gen, train = [], []
    for step in range(2):
        t = step * 4.0
        driver += [
            span("step", t, t + 4, f"s{step}", parent="job", step=step),
            span("generation", t, t + 2, f"g{step}", parent=f"s{step}", bucket="productive"),
            span("policy_training", t + 2, t + 4, f"t{step}", parent=f"s{step}", bucket="productive"),
        ]
        gen.append(
            span(
                "generate",
                t,
                t + 2,
                f"wg{step}",
                parent=f"g{step}",
                remote=True,
                bucket="productive",
                step=step,
                **{"rl.num_tokens": 1_000_000},
            )
        )
        train.append(
            span(
                "train",
                t + 2,
                t + 4,
                f"wt{step}",
                parent=f"t{step}",
                remote=True,
                bucket="productive",
                step=step,
                **{"rl.num_tokens": 1_000_000},
            )
        )
    write_process(run, "driver", 0, 1, driver, root="job", role="driver", **{"host.name": "n0", "rl.num_gpus": 0})
    write_process(
        run, "vllm_policy", 0, 2, gen, **{"host.name": "n0", "rl.num_gpus": 4, "rl.gpu_ids": "0,1,2,3", **model}
    )
    write_process(
        run, "lm_policy", 0, 3, train, **{"host.name": "n1", "rl.num_gpus": 8, "rl.gpu_ids": "0,1,2,3,4,5,6,7", **model}
    )
    return run


def test_tokens_per_gpu_and_mfu_are_the_hand_arithmetic(tmp_path: Path) -> None:
    report = analyze(span_files(_store(tmp_path / "r")), jobs=1)
    rows = {(p["worker_group"], p["phase"]): p for p in report["phases"]}
    train, generate = rows[("lm_policy", "train")], rows[("vllm_policy", "generate")]
    assert train["tokens_per_s"] == pytest.approx(500_000) and train["tokens_per_s_per_gpu"] == pytest.approx(62_500)
    assert generate["tokens_per_s_per_gpu"] == pytest.approx(125_000)
    assert train["mfu"] == pytest.approx(2e6 * 6e9 / (4 * 8 * H100), rel=1e-5)  # 6N per token
    assert generate["mfu"] == pytest.approx(2e6 * 2e9 / (4 * 4 * H100), rel=1e-5)  # 2N per token
    throughput = report["throughput"]
    assert throughput["gpus"] == 12
    assert throughput["e2e_tokens_per_s_per_gpu"] == pytest.approx(2e6 / 8 / 12)  # generation's tokens / wall / GPUs
    assert [s["tokens"] for s in report["steps"]] == [1_000_000, 1_000_000]
    assert report["steps"][0]["e2e_tokens_per_s_per_gpu"] == pytest.approx(1e6 / 4 / 12)


def test_mfu_is_omitted_where_the_model_or_device_is_unknown_and_a_span_may_say_its_flops(tmp_path: Path) -> None:
    """No num_params and no device: no MFU (tokens per GPU still); a span's rl.flops_per_token and the
    resource's rl.device.peak_tflops are used as given."""
    report = analyze(span_files(_store(tmp_path / "r", known=False)), jobs=1)
    assert all(p["mfu"] is None for p in report["phases"])
    assert any(p["tokens_per_s_per_gpu"] for p in report["phases"])
    run = tmp_path / "given"
    write_process(
        run,
        "lm_policy",
        0,
        3,
        [span("train", 0, 2, "x", bucket="productive", step=0, **{"rl.num_tokens": 1000, "rl.flops_per_token": 1e12})],
        **{"rl.num_gpus": 2, "rl.device.peak_tflops": 100},
    )
    (row,) = [p for p in analyze(span_files(run), jobs=1)["phases"] if p["phase"] == "train"]
    assert row["mfu"] == pytest.approx(1000 * 1e12 / (2 * 2 * 100e12))


def test_the_device_table_takes_the_most_specific_name() -> None:
    assert peak_tflops("NVIDIA H100 PCIe") == 756.0 and peak_tflops("NVIDIA H100 80GB HBM3") == 989.0
    assert peak_tflops("NVIDIA A100-SXM4-80GB") == 312.0 and peak_tflops("NVIDIA B200") == 2250.0
    assert peak_tflops("NVIDIA H200") == 989.0 and peak_tflops("Tesla T4") is None and peak_tflops(None) is None
    assert peak_tflops({"rl.device.peak_tflops": 500, "rl.device.name": "NVIDIA A100"}) == 500.0


def test_every_rank_slowing_alike_is_degrading_and_no_straggler(tmp_path: Path) -> None:
    """Four ranks whose compute grows 50 % over 60 steps, all alike: each is degrading (score under 0.8), no
    rank is a straggler at any step (they stay equal to one another)."""
    run = tmp_path / "r"
    for rank in range(4):
        spans, t = [], 0.0
        for step in range(60):
            seconds = 1.0 + 0.5 * step / 59
            spans.append(span("train", t, t + seconds, f"{rank}-{step}", bucket="productive", step=step))
            t += seconds + 0.1
        write_process(run, "lm_policy", rank, 10 + rank, spans)
    stragglers = analyze(span_files(run), jobs=1)["stragglers"]
    assert stragglers["per_step"] == [] and stragglers["persistent"] == []
    degrading = stragglers["degrading"]
    assert sorted(d["rank"] for d in degrading) == [0, 1, 2, 3]
    assert all(d["score"] < 0.8 and d["phase"] == "train" and d["window"] == 20 for d in degrading)
    assert degrading[0]["best_s"] == pytest.approx(1.0 + 0.5 * 9.5 / 59, abs=0.01)


def test_a_steady_rank_is_not_degrading(tmp_path: Path) -> None:
    run = tmp_path / "r"
    write_process(
        run,
        "lm_policy",
        0,
        10,
        [span("train", s * 2.0, s * 2.0 + 1.0, f"{s}", bucket="productive", step=s) for s in range(60)],
    )
    assert analyze(span_files(run), jobs=1)["stragglers"]["degrading"] == []


def test_the_jobs_gpus_are_the_devices_processes_name_not_their_raw_ids(tmp_path: Path) -> None:
    """e2e tokens per GPU divides by the job's devices (rl.gpu.uuids, as rl.num_gpus counts them): a process with
    CUDA_VISIBLE_DEVICES=0,7,1 on a 2-GPU host (one UUID resolved) is 1 GPU, not 3; a trainer naming GPU 0 by
    index and an engine naming it by UUID on one host are 1 GPU; the same UUID on another host is another GPU;
    a process naming no devices counts its raw ids; the same through the refresh cache."""
    from lens_rl.offline.run.cache import cache_folder

    gpu0 = "GPU-aaaa1111-0000-0000-0000-000000000000"

    def gpus(run: Path, *resources: dict[str, object]) -> int:
        steps = [span("rl.job", 0, 12, "job"), span("step", 0.5, 11.5, "s1", parent="job", step=1)]
        write_process(run, "driver", 0, 1, steps, root="job", role="driver")
        for rank, resource in enumerate(resources):
            gen = [span("generation", 1, 11, f"g{rank}", parent="s1", remote=True, bucket="productive", step=1)]
            write_process(run, "actor", rank, 10 + rank, gen, **resource)
        cold = analyze(span_files(run), jobs=1)["throughput"]
        assert analyze(span_files(run), jobs=1, cache=cache_folder(run))["throughput"] == cold  # (through the cache)
        return int(cold["gpus"])

    one = {"host.name": "n0", "rl.gpu_ids": "0,7,1", "rl.num_gpus": 1, "rl.gpu.uuids": [gpu0]}
    assert gpus(tmp_path / "a", one) == 1
    by_uuid = {"host.name": "n0", "rl.gpu_ids": gpu0, "rl.num_gpus": 1, "rl.gpu.uuids": [gpu0]}
    assert gpus(tmp_path / "b", dict(one, **{"rl.gpu_ids": "0"}), by_uuid) == 1
    assert gpus(tmp_path / "c", one, dict(one, **{"host.name": "n1"})) == 2
    assert gpus(tmp_path / "d", one, {"host.name": "n0", "rl.gpu_ids": "2,3", "rl.num_gpus": 2}) == 3


def test_tokens_per_gpu_count_only_the_ranks_whose_gpus_are_known(tmp_path: Path) -> None:
    """Two ranks generate 1,000 tokens each in 4 s, rank 0 on 2 GPUs, rank 1 with no ``rl.num_gpus``: per GPU
    is rank 0's 1,000 tokens over its 8 GPU-seconds (125), not both ranks' tokens over rank 0's GPUs (250);
    tokens/s stays both ranks' (250)."""
    run = tmp_path / "r"
    write_process(run, "driver", 0, 1, [span("step", 0, 10, "s0", step=0)], role="driver", **{"rl.num_gpus": 0})
    for rank, gpus in ((0, 2), (1, 0)):
        gen = span("generation", 0, 4, f"g{rank}", parent="s0", remote=True, bucket="productive", step=0)
        gen["a"]["rl.num_tokens"] = 1000
        model = {"rl.model.num_params": 1e9, "rl.device.name": "NVIDIA H100 80GB HBM3"}
        write_process(run, "rollout", rank, 10 + rank, [gen], **{"rl.num_gpus": gpus, **model})
    (row,) = [p for p in analyze(span_files(run), jobs=1)["phases"] if p["phase"] == "generation"]
    assert row["tokens_per_s"] == pytest.approx(250) and row["tokens_per_s_per_gpu"] == pytest.approx(125)
    assert row["mfu"] == pytest.approx(1000 * 2e9 / (4 * 2 * H100), abs=1e-6)
