"""A TRL / transformers job for tests/frameworks/test_trl.py, with its own measurements written as JSON.

    python trl_job.py OUT.json [--plain-trainer] [--steps N] [--instrument on|off] [--trainings N]
                               [--uninstrument-between]

No lens_rl code unless ``--instrument``: ``on`` starts telemetry (from the environment) and weaves TRL;
``off`` weaves TRL with telemetry left off. ``--trainings N`` trains N trainers one after another in this
process (each counts its steps from 1; ``trainings`` in the JSON has each one's clock and its start in
``time.time_ns``); ``--uninstrument-between`` calls ``lens_rl.uninstrument("trl")`` after the first and lists
in ``unrestored`` every attribute of the woven classes that is not the very object it was before weaving. The job measures itself: each optimizer step's wall and its
optimizer step from its own callback's clock (``on_step_begin`` -> ``on_step_end``, ``on_pre_optimizer_step``
-> ``on_optimizer_step``), TRL's profiling figures (what ``ProfilingContext`` would log), and the losses.

Python's cyclic garbage collector is paused during ``train()``: with torch loaded a collection takes from a few
to tens of milliseconds, and one that falls between lens_rl's clock and the job's (a few microseconds apart,
measuring the same interval) would be a difference of neither's making. For the same reason the GIL's switch
interval is 0.2 ms (Python's default, 5 ms, is what a thread that wants the GIL back can wait: on a loaded
machine, lens_rl's export thread taking its turn between the two clocks).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

import trl_grpo
from transformers import TrainerCallback


class Clock(TrainerCallback):  # type: ignore[misc]
    """The job's own clock: step walls and optimizer steps, by ``state.global_step`` after the step."""

    def __init__(self) -> None:
        self.steps: dict[int, float] = {}
        self.optimizer: dict[int, float] = {}
        self._t0 = 0.0
        self._o0 = 0.0

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._t0 = time.perf_counter()

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._o0 = time.perf_counter()

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.optimizer[state.global_step + 1] = time.perf_counter() - self._o0

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.steps[state.global_step] = time.perf_counter() - self._t0


def profiled() -> list[tuple[str, float]]:
    """TRL's profiling figures, as its ProfilingContext reports them (name, seconds), in order."""
    from trl.extras import profiling

    seen: list[tuple[str, float]] = []
    report = profiling.ProfilingContext._log_metrics

    def log_metrics(self: Any, duration: float) -> None:
        seen.append((self.name, duration))
        report(self, duration)

    profiling.ProfilingContext._log_metrics = log_metrics
    return seen


def plain_trainer(steps: int, output_dir: str, callbacks: list[Any]) -> Any:
    """A plain transformers Trainer: the tiny Qwen2 model learning to continue a fixed token pattern."""
    from datasets import Dataset
    from transformers import Trainer, TrainingArguments

    tokenizer = trl_grpo.tiny_tokenizer()
    ids = [[3, 4, 5, 6, 7, 8, 9, 10]] * 32
    data = Dataset.from_dict({"input_ids": ids, "labels": ids, "attention_mask": [[1] * 8] * 32})
    args = TrainingArguments(
        output_dir=output_dir,
        max_steps=steps,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        use_cpu=True,
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
    )
    return Trainer(model=trl_grpo.tiny_model(tokenizer), args=args, train_dataset=data, callbacks=callbacks)


#: (module, class) whose attributes lens_rl's ``trl`` weaving patches (``transformers`` implied).
WOVEN_CLASSES = (
    ("transformers.trainer", "Trainer"),
    ("transformers.trainer_callback", "CallbackHandler"),
    ("accelerate.accelerator", "Accelerator"),
    ("trl.extras.profiling", "ProfilingContext"),
)


def snapshot() -> dict[str, Any]:
    """Every attribute of the woven classes as stored (``module.Class.attr`` -> the object itself)."""
    import importlib

    seen = {}
    for module, name in WOVEN_CLASSES:
        cls = getattr(importlib.import_module(module), name)
        seen.update({f"{module}.{name}.{attr}": value for attr, value in vars(cls).items()})
    return seen


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--plain-trainer", action="store_true")
    parser.add_argument("--instrument", choices=["on", "off"])
    parser.add_argument("--trainings", type=int, default=1)
    parser.add_argument("--uninstrument-between", action="store_true")
    args = parser.parse_args()
    figures = profiled()
    before = snapshot() if args.uninstrument_between else {}
    if args.instrument:
        import lens_rl

        if args.instrument == "on":
            lens_rl.init_telemetry_driver(None, algorithm="grpo")
        woven = lens_rl.instrument("trl")
        assert woven == ["transformers", "trl"], woven
    trainings = []
    unrestored: list[str] = []
    for number in range(args.trainings):
        if number and args.uninstrument_between:
            import lens_rl

            lens_rl.uninstrument("trl")
            after = snapshot()
            unrestored = sorted(k for k in before.keys() | after.keys() if before.get(k) is not after.get(k))
        clock = Clock()
        with tempfile.TemporaryDirectory() as scratch:
            make = plain_trainer if args.plain_trainer else trl_grpo.trainer
            trainer = make(args.steps, scratch, [clock])
            gc.collect()
            gc.disable()
            sys.setswitchinterval(0.0002)
            start_ns = time.time_ns()
            try:
                trainer.train()
            finally:
                gc.enable()
        trainings.append({"steps": clock.steps, "optimizer": clock.optimizer, "start_ns": start_ns})
    losses = [row["loss"] for row in trainer.state.log_history if "loss" in row]
    result = {**trainings[0], "profiling": figures, "losses": losses, "trainings": trainings}
    Path(args.out).write_text(json.dumps({**result, "unrestored": unrestored}))
    if args.instrument == "on":
        import lens_rl

        lens_rl.shutdown_telemetry()


if __name__ == "__main__":
    main()
