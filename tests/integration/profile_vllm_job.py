"""A job with a real vLLM ``LLM`` in process, profiled by lens_rl's ``vllm`` backend:
``python profile_vllm_job.py MODEL_DIR TRACE_DIR``.

Telemetry from the environment (``LENS_RL_OTEL_PROFILE`` picks the steps); the engine's own profiler writes under
``TRACE_DIR/r1/profiles/vllm`` (its ``profiler_config``). Four steps, each an umbrella with one ``generation``.
Prints ``done`` last.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import vllm_scenario
from vllm import LLM, SamplingParams

import lens_rl
from lens_rl.devices import register_engine


def main() -> None:
    model, trace_dir = sys.argv[1], sys.argv[2]
    lens_rl.init_telemetry_worker(rank=0, world_size=1, worker_group="rollout")
    out = Path(trace_dir) / "r1" / "profiles" / "vllm"
    llm = LLM(
        model=model,
        **vllm_scenario.ENGINE,
        profiler_config={"profiler": "torch", "torch_profiler_dir": str(out.resolve())},
    )
    register_engine(llm)
    params = SamplingParams(max_tokens=4, ignore_eos=True)
    for step in range(4):
        with lens_rl.traced_phase("step", step=step), lens_rl.traced_phase("generation"):
            llm.generate([{"prompt_token_ids": [5, 6, 7, 8]}], params, use_tqdm=False)
    lens_rl.shutdown_telemetry()
    print("done", flush=True)


if __name__ == "__main__":
    main()
