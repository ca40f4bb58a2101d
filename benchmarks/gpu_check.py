"""The device check, for a machine with an NVIDIA GPU: does lens_rl's GPU sampling tell a busy GPU from an
idle one, agree with ``nvidia-smi``, and cost nothing worth naming?

Run (one command, on the GPU machine, with torch and the ``gpu`` extra installed)::

    python benchmarks/gpu_check.py [--seconds 8] [--device 0] [--require-gpu]

Under lens_rl (file store, ``gpu_sample_hz`` 2: the default), it runs a ``matmul`` phase (CUDA matrix products back to
back) and a ``sleep`` phase of the same length, then joins the host's sample file to the two phases' spans
and prints, for each, the GPU busy lens_rl read (the mean utilisation of the device inside the phase, its
first and last half second left out: NVML averages over up to a second) beside ``nvidia-smi``'s readings
taken meanwhile, and the sampler thread's CPU share. It exits 0 only when the matmul phase reads at least
80 % busy, the sleep phase at most 5 %, lens_rl and nvidia-smi agree within 10 points on each, and the
sampler costs at most 0.1 % of one core. Without a GPU (no torch, no CUDA, no NVML, no nvidia-smi) it says
so and exits 0 (1 with ``--require-gpu``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

BUSY_MIN, IDLE_MAX, AGREE_POINTS, COST_MAX = 80.0, 5.0, 10.0, 0.001
EDGE_S = 0.5


def no_gpu_reason(device: int) -> str | None:
    """Why this machine cannot run the check (None: it can)."""
    if os.environ.get("LENS_RL_FAKE_NVML"):
        return "LENS_RL_FAKE_NVML is set: the stand-in NVML is not a GPU"
    if shutil.which("nvidia-smi") is None:
        return "no nvidia-smi on PATH"
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
    except Exception as exc:
        return f"no NVML ({type(exc).__name__}: {exc}; install the gpu extra: pip install 'lens-rl[gpu]')"
    try:
        import torch
    except Exception as exc:
        return f"no torch ({type(exc).__name__})"
    if not torch.cuda.is_available() or torch.cuda.device_count() <= device:
        return f"torch sees no CUDA device {device}"
    return None


def smi_poll(uuid: str, readings: list[tuple[int, float]], stop: threading.Event) -> None:
    """``nvidia-smi``'s utilisation of the device every 0.5 s, with the time of each reading."""
    query = ["nvidia-smi", "--query-gpu=uuid,utilization.gpu", "--format=csv,noheader,nounits"]
    while not stop.wait(0.5):
        try:
            out = subprocess.run(query, capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        for line in out.splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) == 2 and parts[0] == uuid and parts[1].isdigit():
                readings.append((time.time_ns(), float(parts[1])))


def matmul(seconds: float, device: int) -> None:
    import torch

    a = torch.randn(8192, 8192, device=f"cuda:{device}", dtype=torch.float16)
    b = torch.randn(8192, 8192, device=f"cuda:{device}", dtype=torch.float16)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for _ in range(8):
            a = (a @ b).clamp_(-1, 1)
        torch.cuda.synchronize(device)


def mean_within(points: list[tuple[int, float]], start: int, end: int) -> float | None:
    inside = [v for t, v in points if start + EDGE_S * 1e9 <= t <= end - EDGE_S * 1e9]
    return sum(inside) / len(inside) if inside else None


def read_run(run_dir: Path, uuid: str) -> tuple[dict[str, tuple[int, int]], list[tuple[int, float]]]:
    """The two phases' spans (name -> start, end) and the device's utilisation samples."""
    phases: dict[str, tuple[int, int]] = {}
    for path in run_dir.glob("spans-*.jsonl"):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if row.get("n") in ("matmul", "sleep"):
                phases[row["n"]] = (row["b"], row["e"])
    samples: list[tuple[int, float]] = []
    for path in run_dir.glob("gpu-*.jsonl"):
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        slot = next(i for i, d in enumerate(lines[0]["devices"]) if d["uuid"] == uuid)
        samples += [(s["t"], s["d"][slot][0]) for s in lines[1:] if s["d"][slot] and s["d"][slot][0] is not None]
    return phases, sorted(samples)


def check(seconds: float, device: int) -> int:
    import pynvml
    import torch

    import lens_rl
    from lens_rl.devices import gpu

    pynvml.nvmlInit()
    uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(device))
    uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
    pynvml.nvmlShutdown()
    folder = tempfile.mkdtemp(prefix="lens_rl_gpu_check_")
    run_id = f"gpucheck{os.getpid()}"
    config = {"enabled": True, "trace_dir": folder, "run_id": run_id, "gpu_sample_hz": 2}
    lens_rl.init_telemetry_driver({"telemetry": config}, "check")
    torch.zeros(1, device=f"cuda:{device}")  # CUDA up before the phases
    readings: list[tuple[int, float]] = []
    stop = threading.Event()
    poller = threading.Thread(target=smi_poll, args=(uuid, readings, stop), daemon=True)
    poller.start()
    time.sleep(1.0)
    with lens_rl.traced_phase("matmul", bucket="productive"):
        matmul(seconds, device)
    with lens_rl.traced_phase("sleep", bucket="idle"):
        time.sleep(seconds)
    stop.set()
    sampler = gpu.current()
    cost = None
    if sampler is not None and sampler.first is not None and sampler.last is not None:
        cost = (sampler.last[0] - sampler.first[0]) / max(sampler.last[1] - sampler.first[1], 1e-9)
    lens_rl.shutdown_telemetry(10_000)
    poller.join(15)
    phases, samples = read_run(Path(folder) / run_id, uuid)
    print(f"device {device} ({uuid}); samples in {folder}/{run_id}")
    print(f"{'phase':8s}{'lens_rl busy':>14s}{'nvidia-smi':>12s}  expected")
    ok = True
    for name, want in (("matmul", f">= {BUSY_MIN:g} %"), ("sleep", f"<= {IDLE_MAX:g} %")):
        if name not in phases:
            print(f"{name:8s}no span recorded: the run folder holds no {name!r} phase")
            ok = False
            continue
        start, end = phases[name]
        mine, theirs = mean_within(samples, start, end), mean_within(readings, start, end)
        good = mine is not None and (mine >= BUSY_MIN if name == "matmul" else mine <= IDLE_MAX)
        agree = mine is not None and theirs is not None and abs(mine - theirs) <= AGREE_POINTS
        ok = ok and good and agree
        print(
            f"{name:8s}{_pct(mine):>14s}{_pct(theirs):>12s}  {want}{'' if good else '  MISSED'}"
            f"{'' if agree else '  (disagrees with nvidia-smi)'}"
        )
    cost_ok = cost is not None and cost <= COST_MAX
    print(f"sampler CPU: {'-' if cost is None else f'{cost * 100:.3f} %'} of one core at 2 Hz (goal <= 0.1 %)")
    ok = ok and cost_ok
    print("device check: " + ("ok" if ok else "FAILED"))
    return 0 if ok else 1


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} %"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="length of each phase")
    parser.add_argument("--device", type=int, default=0, help="the CUDA / NVML index to check")
    parser.add_argument("--require-gpu", action="store_true", help="exit 1 (not 0) where there is no GPU")
    args = parser.parse_args(argv)
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # CUDA's indices as NVML's
    reason = no_gpu_reason(args.device)
    if reason is not None:
        print(f"gpu_check: no NVIDIA GPU to check here ({reason}); nothing measured.")
        return 1 if args.require_gpu else 0
    return check(args.seconds, args.device)


if __name__ == "__main__":
    sys.exit(main())
