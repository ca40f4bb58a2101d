"""Stand-in for ``skyrl_train.utils.utils`` (SkyRL's earlier package): its own ``Timer``, the same shape."""

from _skyrl_timer import timer_class

Timer = timer_class()
