"""The GPU sampler in real processes over the stand-in NVML: the sample file, the election, the failures."""

from __future__ import annotations

import json
import os
import signal
import uuid
from pathlib import Path

import pytest

from tests.conftest import lens
from tests.gpu_jobs import Job, gpu_files, job_env, read_gpu, scenario, wait_for

pytestmark = pytest.mark.slow

GIB = 1 << 30


def run_id() -> str:
    return f"g{uuid.uuid4().hex[:10]}"


def test_the_sample_file_has_its_header_and_nulls_never_zeros(tmp_path: Path, job: Job) -> None:
    """Each device's identity and counters head the file; unsupported and all-zero counters are null, not 0."""
    sc = scenario(
        tmp_path,
        [
            {
                "uuid": "GPU-busy",
                "name": "NVIDIA H100",
                "memory_total": 80 * GIB,
                "util": 90,
                "mem_util": 40,
                "mem_used": 30 * GIB,
                "power": 400_000,
                "sm_clock": 1980,
                "gpm": True,
                "sm_active": 70,
                "sm_occupancy": 35,
                "tensor_active": 50,
            },
            {"uuid": "GPU-nopower", "not_supported": ["power", "sm_clock"], "util": 10},
            {"uuid": "GPU-zero", "zero": True, "mem_used": 2 * GIB},
        ],
    )
    run_dir, stdout = _three_samples(tmp_path, job, sc)
    [path] = gpu_files(run_dir)
    head, samples = read_gpu(path)
    assert path.name == f"gpu-{head['host']}-{head['pid']}.jsonl"
    assert {k: head[k] for k in ("v", "header", "format", "kind", "run_id", "attempt", "hz")} == {
        "v": 1,
        "header": True,
        "format": "lens_rl.gpu/1",
        "kind": "gpu",
        "run_id": run_dir.name,
        "attempt": 0,
        "hz": 5.0,
    }
    assert head["since"] <= samples[0]["t"]
    assert head["devices"] == [
        {
            "i": 0,
            "uuid": "GPU-busy",
            "name": "NVIDIA H100",
            "mem_total": 80 * GIB,
            "has": ["util", "mem_util", "mem_used", "power", "sm_clock", "sm_active", "sm_occupancy", "tensor_active"],
        },
        {
            "i": 1,
            "uuid": "GPU-nopower",
            "name": "NVIDIA Stand-in GPU",
            "mem_total": 80 * GIB,
            "has": ["util", "mem_util", "mem_used"],
        },
        {
            "i": 2,
            "uuid": "GPU-zero",
            "name": "NVIDIA Stand-in GPU",
            "mem_total": 80 * GIB,
            "has": ["util", "mem_util", "mem_used", "power", "sm_clock"],
        },
    ]
    for sample in samples:
        busy, nopower, zero = sample["d"]
        assert busy == [90, 40, 30 * GIB, 400_000, 1980, 70.0, 35.0, 50.0]
        assert nopower == [10, 0, 0, None, None, None, None, None]
        assert zero == [None, None, 2 * GIB, None, None, None, None, None]
    times = [s["t"] for s in samples]
    assert times == sorted(times)
    calls = json.loads(stdout.strip().splitlines()[-1])["calls"]
    assert "nvmlDeviceGetComputeRunningProcesses" not in calls  # device-level queries only


def _three_samples(tmp_path: Path, job: Job, sc: str) -> tuple[Path, str]:
    """A job of one process on GPU 0 of scenario ``sc``, run until its sample file holds 3 samples; its run
    folder and output."""
    rid = run_id()
    job.start(job_env(tmp_path / "traces", rid, sc, CUDA_VISIBLE_DEVICES="0"))
    run_dir = tmp_path / "traces" / rid
    wait_for(lambda: gpu_files(run_dir) and len(read_gpu(gpu_files(run_dir)[0])[1]) >= 3, what="3 samples")
    ((code, stdout, stderr),) = job.finish()
    assert code == 0, stderr
    return run_dir, stdout


def test_a_utilisation_that_is_no_percentage_is_null_and_the_others_are_kept(tmp_path: Path, job: Job) -> None:
    """A device whose NVML utilisation reads past 100 % reads null there (no percentage), so every sample line
    stays one the readers take: its neighbours' figures are all in ``goodput``."""
    sc = scenario(tmp_path, [{"uuid": "GPU-a", "util": 50}, {"uuid": "GPU-odd", "util": 101, "mem_util": 250}])
    run_dir, _ = _three_samples(tmp_path, job, sc)
    _, samples = read_gpu(gpu_files(run_dir)[0])
    assert all(s["d"][1][:2] == [None, None] and s["d"][0][0] == 50 for s in samples)
    out = lens("goodput", str(run_dir), "--json")
    assert out.returncode == 0, out.stderr
    [rank] = json.loads(out.stdout)["gpu"]["ranks"]
    assert rank["devices"] == ["GPU-a"] and rank["gpu_busy"] == 0.5


def test_another_process_takes_over_when_the_holder_is_killed(tmp_path: Path, job: Job) -> None:
    """SIGKILL the sampling process: another of the run on the host samples on, with no gap over one heartbeat."""
    sc = scenario(tmp_path, [{"uuid": "GPU-a", "util": 50}, {"uuid": "GPU-b", "util": 60}])
    rid = run_id()
    run_dir = tmp_path / "traces" / rid
    env = job_env(tmp_path / "traces", rid, sc, LENS_RL_OTEL_HEARTBEAT_INTERVAL_MS="2000")
    first = job.start({**env, "RANK": "0"})
    wait_for(lambda: gpu_files(run_dir) and len(read_gpu(gpu_files(run_dir)[0])[1]) >= 2, what="first sampler")
    second = job.start({**env, "RANK": "1"})
    wait_for(lambda: len(list(run_dir.glob("live-actor-1-*.json"))) == 1, what="second process up")
    assert len(gpu_files(run_dir)) == 1  # one sampler per host and run
    os.kill(first.pid, signal.SIGKILL)
    first.wait(30)
    killed_file = run_dir / f"gpu-{read_gpu(gpu_files(run_dir)[0])[0]['host']}-{first.pid}.jsonl"
    new = wait_for(lambda: [p for p in gpu_files(run_dir) if p != killed_file], what="the takeover")[0]
    wait_for(lambda: len(read_gpu(new)[1]) >= 2, what="samples after the takeover")
    job.finish()
    _, before = read_gpu(killed_file)
    head, after = read_gpu(new)
    assert head["pid"] == second.pid
    gap_s = (after[0]["t"] - before[-1]["t"]) / 1e9
    assert 0 < gap_s <= 2.0, gap_s


def test_a_takeover_keeps_the_idle_clock_of_the_device(tmp_path: Path, job: Job) -> None:
    """A GPU idle before the holder is SIGKILLed stays idle since then after the takeover (no alert restarts)."""
    from lens_rl.devices import election

    sc = scenario(tmp_path, [{"uuid": "GPU-idle", "util": 0, "mem_used": 1 << 30}])
    rid = run_id()
    run_dir = tmp_path / "traces" / rid
    env = job_env(tmp_path / "traces", rid, sc, LENS_RL_OTEL_HEARTBEAT_INTERVAL_MS="1000")
    # the job's host-local files are in its TMPDIR (the test's folder): find the latest sample's name there
    latest = Path(env["TMPDIR"]) / election.latest_path(rid).name

    def idle_since() -> tuple[int, int] | None:
        try:
            data = json.loads(latest.read_bytes())
        except (OSError, ValueError):
            return None
        since = data["devices"]["GPU-idle"]["idle_since_ns"]
        return (data["pid"], since) if since is not None else None

    first = job.start({**env, "RANK": "0"})
    _, before = wait_for(
        lambda: idle_since() if idle_since() and idle_since()[0] == first.pid else None,
        what="the first sampler's idle clock",
    )
    second = job.start({**env, "RANK": "1"})
    wait_for(lambda: len(list(run_dir.glob("live-actor-1-*.json"))) == 1, what="second process up")
    os.kill(first.pid, signal.SIGKILL)
    first.wait(30)
    holder, after = wait_for(
        lambda: idle_since() if idle_since() and idle_since()[0] == second.pid else None,
        what="the new holder's idle clock",
    )
    job.finish()
    assert holder == second.pid
    assert after == before


def test_a_fifo_in_place_of_the_latest_sample_blocks_neither_sampler_nor_heartbeat(tmp_path: Path, job: Job) -> None:
    """Something that is no file where the host keeps the run's latest sample (a FIFO: opening it to read would
    wait for a writer for good) is no latest sample: the sampler samples, replaces it, and heartbeats carry the
    process's GPUs."""
    from lens_rl.devices import election

    sc = scenario(tmp_path, [{"uuid": "GPU-a", "util": 20}])
    rid = run_id()
    env = job_env(tmp_path / "traces", rid, sc, CUDA_VISIBLE_DEVICES="0")
    os.mkfifo(Path(env["TMPDIR"]) / election.latest_path(rid).name)
    job.start(env)
    run_dir = tmp_path / "traces" / rid
    wait_for(lambda: gpu_files(run_dir) and len(read_gpu(gpu_files(run_dir)[0])[1]) >= 3, what="3 samples")

    def beat_with_gpu() -> bool:
        for live in run_dir.glob("live-*.json"):
            try:
                return "gpu" in json.loads(live.read_text())
            except ValueError:
                return False
        return False

    wait_for(beat_with_gpu, what="a heartbeat with the GPU's latest sample")
    ((code, _, stderr),) = job.finish()
    assert code == 0, stderr


@pytest.mark.parametrize("suffixes", [("", ""), ("-qwen2.5-7b", "-qwen2.5-3b")], ids=["two-runs", "alike-to-a-dot"])
def test_two_runs_on_one_host_each_have_their_sampler(tmp_path: Path, job: Job, suffixes: tuple[str, str]) -> None:
    """Two runs on one host: each run's folder gets its own sample file; run ids such as ``qwen2.5-7b`` and
    ``qwen2.5-3b`` (alike up to a dot) are two runs too (neither takes the other's lock)."""
    sc = scenario(tmp_path, [{"uuid": "GPU-a", "util": 20}])
    stem = run_id()  # (two runs: alike up to their suffixes, or two ids drawn apart)
    one, two = (stem + suffixes[0], stem + suffixes[1]) if suffixes[0] else (stem, run_id())
    job.start(job_env(tmp_path / "traces", one, sc))
    job.start(job_env(tmp_path / "traces", two, sc))
    for rid in (one, two):
        wait_for(lambda rid=rid: gpu_files(tmp_path / "traces" / rid), what=f"{rid}'s sampler")
    assert all(code == 0 for code, _, _ in job.finish())
    for rid in (one, two):
        [path] = gpu_files(tmp_path / "traces" / rid)
        assert read_gpu(path)[0]["run_id"] == rid


@pytest.mark.parametrize("standin", [False, True], ids=["no-pynvml", "no-library"])
def test_without_nvml_nothing_is_written_and_nothing_said(tmp_path: Path, job: Job, standin: bool) -> None:
    """No pynvml installed, or no NVML library: no sample file, no warning at the default log level."""
    sc = scenario(tmp_path, [{"uuid": "GPU-a"}], library=False) if standin else None
    rid = run_id()
    job.start(job_env(tmp_path / "traces", rid, sc, standin=standin, CUDA_VISIBLE_DEVICES="0"))
    run_dir = tmp_path / "traces" / rid
    wait_for(lambda: list(run_dir.glob("live-*.json")), what="a heartbeat")
    ((code, stdout, stderr),) = job.finish()
    assert code == 0, stderr
    assert gpu_files(run_dir) == []
    assert "lens_rl" not in stderr and "GPU" not in stderr


@pytest.mark.parametrize("case", ["no-pynvml", "no-library", "no-driver"])
def test_without_nvml_one_debug_line_says_why(tmp_path: Path, job: Job, case: str) -> None:
    """With debug logging on, a process on a GPU (CUDA_VISIBLE_DEVICES set: identity and the sampler both
    look for NVML) says why there is no GPU sampling in one debug line, not one per look."""
    sc = None if case == "no-pynvml" else scenario(tmp_path, [{"uuid": "GPU-a"}], **{case[3:]: False})
    rid = run_id()
    env = job_env(tmp_path / "traces", rid, sc, standin=sc is not None, CUDA_VISIBLE_DEVICES="0", GPU_JOB_DEBUG="1")
    job.start(env)
    wait_for(lambda: list((tmp_path / "traces" / rid).glob("live-*.json")), what="a heartbeat")
    ((code, _stdout, stderr),) = job.finish()
    assert code == 0, stderr
    assert stderr.count("no GPU sampling") == 1, stderr


def test_a_failing_nvml_call_is_one_warning_and_the_job_goes_on(tmp_path: Path, job: Job) -> None:
    """A GPU lost mid-run: the sample that failed reads null for it, one warning, sampling stops, exit 0."""
    lost = tmp_path / "lose-the-gpu"
    sc = scenario(tmp_path, [{"uuid": "GPU-ok", "util": 30}, {"uuid": "GPU-lost", "util": 40, "fail_when": str(lost)}])
    rid = run_id()
    job.start(job_env(tmp_path / "traces", rid, sc))
    run_dir = tmp_path / "traces" / rid
    path = wait_for(lambda: gpu_files(run_dir), what="the sample file")[0]
    wait_for(lambda: len(read_gpu(path)[1]) >= 2, what="samples")
    lost.touch()
    wait_for(lambda: any(s["d"][1] is None for s in read_gpu(path)[1]), what="the failure")
    ((code, _, stderr),) = job.finish()
    assert code == 0, stderr
    _, samples = read_gpu(path)
    assert samples[-1]["d"] == [[30, 0, 0, 60000, 1410, None, None, None], None]
    assert all(s["d"][1] is not None for s in samples[:-1])
    assert stderr.count("GPU sampling stopped") == 1


def test_telemetry_off_never_imports_nvml(tmp_path: Path, job: Job) -> None:
    """With telemetry off, pynvml is never imported, even with GPUs named and the stand-in on the path."""
    sc = scenario(tmp_path, [{"uuid": "GPU-a"}])
    rid = run_id()
    job.start(job_env(tmp_path / "traces", rid, sc, LENS_RL_OTEL_ENABLED="false", CUDA_VISIBLE_DEVICES="0"))
    ((code, stdout, stderr),) = job.finish()
    assert code == 0, stderr
    assert json.loads(stdout.strip().splitlines()[-1]) == {"calls": None}
    assert not (tmp_path / "traces").exists()


def test_zero_hz_turns_sampling_off(tmp_path: Path, job: Job) -> None:
    """gpu_sample_hz 0: no sampler, no sample file, NVML used for identity alone."""
    sc = scenario(tmp_path, [{"uuid": "GPU-a"}])
    rid = run_id()
    job.start(job_env(tmp_path / "traces", rid, sc, LENS_RL_OTEL_GPU_SAMPLE_HZ="0"))
    run_dir = tmp_path / "traces" / rid
    wait_for(lambda: list(run_dir.glob("live-*.json")), what="a heartbeat")
    ((code, stdout, stderr),) = job.finish()
    assert code == 0, stderr
    assert gpu_files(run_dir) == []


def test_a_tiny_rate_samples_once_and_the_job_and_its_reading_run_clean(tmp_path: Path, job: Job) -> None:
    """gpu_sample_hz 1e-300 (allowed: above 0): the sampler writes its header and a first sample, waits without
    overflowing its timer (no traceback in the job's stderr), and ``lens-rl goodput`` reads the file."""
    sc = scenario(tmp_path, [{"uuid": "GPU-a"}])
    rid = run_id()
    job.start(job_env(tmp_path / "traces", rid, sc, LENS_RL_OTEL_GPU_SAMPLE_HZ="1e-300"))
    run_dir = tmp_path / "traces" / rid
    path = wait_for(lambda: gpu_files(run_dir), what="the sample file")[0]
    wait_for(lambda: len(read_gpu(path)[1]) >= 1, what="a sample")
    ((code, _stdout, stderr),) = job.finish()
    assert code == 0 and "Traceback" not in stderr and "Error" not in stderr, stderr
    out = lens("goodput", str(run_dir), "--json")
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr


def test_a_bad_rate_in_a_workers_environment_is_one_warning_and_telemetry_off(tmp_path: Path, job: Job) -> None:
    """LENS_RL_OTEL_GPU_SAMPLE_HZ=50 on a worker: one warning naming the field and what is allowed, no files."""
    sc = scenario(tmp_path, [{"uuid": "GPU-a"}])
    rid = run_id()
    job.start(job_env(tmp_path / "traces", rid, sc, LENS_RL_OTEL_GPU_SAMPLE_HZ="50"))
    ((code, stdout, stderr),) = job.finish()
    assert code == 0, stderr
    assert stderr.count("gpu_sample_hz") == 1 and "from 0 (off) to 10" in stderr
    assert not (tmp_path / "traces" / rid).exists()
