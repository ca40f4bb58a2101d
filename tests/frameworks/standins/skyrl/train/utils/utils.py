"""Stand-in for ``skyrl.train.utils.utils``: its ``Timer``."""

from _skyrl_timer import timer_class

Timer = timer_class()
