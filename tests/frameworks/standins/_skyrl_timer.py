"""The one ``Timer`` shape of SkyRL 0.3.0 and skyrl_train 0.3.1 (``Timer(message, update_dict=None)``, a sync
and async context manager adding its seconds, by ``time.time``, to ``update_dict[message]``): each stand-in
module gets a class of its own, as each real package has."""

from __future__ import annotations

import time
from typing import Any


def timer_class() -> type:
    class Timer:
        def __init__(self, message: str, update_dict: dict[str, float] | None = None) -> None:
            self.message = message
            self.update_dict = update_dict

        def __enter__(self) -> Timer:
            self.start_time = time.time()
            return self

        def __exit__(self, exc_type: Any, exc_val: Any, exc_tb: Any) -> None:
            self._add(time.time() - self.start_time)

        async def __aenter__(self) -> Timer:
            self.start_time = time.time()
            return self

        async def __aexit__(self, exc_type: Any, exc_val: Any, exc_tb: Any) -> None:
            self._add(time.time() - self.start_time)

        def _add(self, seconds: float) -> None:
            if self.update_dict is not None:
                self.update_dict[self.message] = self.update_dict.get(self.message, 0.0) + seconds

    return Timer
