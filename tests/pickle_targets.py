"""Importable decorated objects for the pickling tests (pickled by reference)."""

from __future__ import annotations

from lens_rl import traced_phase, traced_worker_init, with_bucket


@traced_phase("generation", step=1)
def generate(x: int) -> int:
    return x + 1


@traced_worker_init("policy.init")
class Policy:
    def __init__(self, rank: int = 0) -> None:
        self.rank = rank

    @traced_phase("policy_training")
    def train(self, n: int) -> int:
        return n * 2


@with_bucket("overhead")
def validate() -> int:
    return 3
