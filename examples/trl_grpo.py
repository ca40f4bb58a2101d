"""A TRL GRPO job on the CPU, with a tiny Qwen2 model and tokenizer built here (no model hub), and no lens_rl code.

Run it traced, as it is::

    lens-rl run -- python examples/trl_grpo.py
    lens-rl goodput lens_traces/<run id>

``lens-rl run`` weaves TRL (every profiled block a phase, each optimizer step an umbrella) into this
unmodified script. In your own code the same is ``lens_rl.instrument("trl")`` after
``lens_rl.init_telemetry_driver(...)``. Needs ``pip install trl transformers datasets accelerate`` and a CPU
torch (``pip install torch==2.13.0``). ``--steps N`` sets the optimizer steps (default 4).
"""

from __future__ import annotations

import argparse
import tempfile
from typing import Any

WORDS = ["<pad>", "<unk>", "<eos>", "a", "b", "c", "d", "e", "f", "g", "h", "say", "letters", "please", "now"]


def tiny_tokenizer() -> Any:
    """A word-level tokenizer over :data:`WORDS`, built in memory."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {word: i for i, word in enumerate(WORDS)}
    raw = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    tokenizer.chat_template = None
    return tokenizer


def tiny_model(tokenizer: Any) -> Any:
    """A two-layer Qwen2 causal LM with random weights, built from a config."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(WORDS),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
    )
    return Qwen2ForCausalLM(config)


def letters_reward(completions: list[str], **kwargs: Any) -> list[float]:
    """A reward function: one point per letter word in the completion."""
    return [float(sum(word in "abcdefgh" for word in text.split())) for text in completions]


def trainer(steps: int, output_dir: str, callbacks: list[Any] | None = None) -> Any:
    """The GRPO trainer: 4 prompts a step, 4 completions of 8 tokens each, no vLLM, on the CPU. The model is
    saved to ``output_dir`` and loaded by path, so TRL can load the reference policy (``beta`` > 0) from it too;
    each generation serves two steps (``num_iterations=2``), so the old policy's logprobs are computed."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    tokenizer = tiny_tokenizer()
    model_dir = f"{output_dir}/tiny-qwen2"
    tiny_model(tokenizer).save_pretrained(model_dir)
    prompts = Dataset.from_dict({"prompt": ["say letters please now", "say a b c", "letters now", "say d e"] * 8})
    config = GRPOConfig(
        output_dir=output_dir,
        max_steps=steps,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=8,
        learning_rate=1e-3,
        beta=0.04,
        num_iterations=2,
        use_vllm=False,
        use_cpu=True,
        bf16=False,
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        seed=0,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    return GRPOTrainer(
        model=model_dir,
        reward_funcs=[letters_reward],
        args=config,
        train_dataset=prompts,
        processing_class=tokenizer,
        callbacks=callbacks,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as out:
        trainer(args.steps, out).train()
    print("done")


if __name__ == "__main__":
    main()
