"""Stand-in for ``skyrl_train.utils.utils``: the same ``Timer`` as ``skyrl.train.utils.utils``."""

from __future__ import annotations

import time
from typing import Any


class Timer:
    def __init__(self, message: str, update_dict: dict[str, float] | None = None) -> None:
        self.message = message
        self.update_dict = update_dict

    def __enter__(self) -> Timer:
        self.start_time = time.time()
        return self

    def __exit__(self, exc_type: Any, exc_val: Any, exc_tb: Any) -> None:
        if self.update_dict is not None:
            self.update_dict[self.message] = self.update_dict.get(self.message, 0.0) + time.time() - self.start_time

    async def __aenter__(self) -> Timer:
        self.start_time = time.time()
        return self

    async def __aexit__(self, exc_type: Any, exc_val: Any, exc_tb: Any) -> None:
        if self.update_dict is not None:
            self.update_dict[self.message] = self.update_dict.get(self.message, 0.0) + time.time() - self.start_time
