"""The export retry policy: what a failed export is worth (retry, split, drop) and how an outage is told.

* Only what can succeed is retried: no answer, HTTP 408, 429 and 5xx (the OTLP spec's retryable statuses),
  with capped backoff (0.25 s doubling to 5 s) for up to a window (5 minutes by default).
* A batch the collector rejects as too large (413), or too large to send, is split and resent in halves.
* Any other rejection is permanent: the batch is dropped and counted, and later spans still go out.
* An outage is one warning when it starts (naming the exporter's first error) and one line when it ends;
  in between, the exporter's own repeated error logs are muted. Spans and metrics keep one each.

Example::

    verdict(413, batch_size=100)    # "split"
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

from lens_rl._attributes import clean_text, mask_url
from lens_rl.export._sdk import endpoint_of

__all__ = ["RETRYABLE_STATUS", "UNSENT", "Outage", "backoff", "target_of", "verdict"]

_log = logging.getLogger("lens_rl")

#: HTTP statuses worth retrying (the OTLP spec's retryable ones, plus 408).
RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})
#: The status of an export that sent nothing (the batch could not be encoded, or the exporter is shut down).
UNSENT = "unsent"


class _OutageFilter(logging.Filter):
    """Drops an exporter's repeated error logs while some pipeline of its kind is in an outage."""

    def __init__(self) -> None:
        super().__init__()
        self.quiet = 0  # outages currently open

    def filter(self, record: logging.LogRecord) -> bool:
        return self.quiet == 0 or record.levelno > logging.ERROR


_FILTERS: dict[str, _OutageFilter] = {}


def _outage_filter(exporter: object) -> _OutageFilter:
    """The filter on the loggers ``exporter`` logs through: its class's module and, for a subclass of
    OpenTelemetry's exporters (lens_rl's OTLP ones), theirs."""
    modules = [c.__module__ for c in type(exporter).__mro__ if c.__module__.startswith("opentelemetry.exporter")]
    key = type(exporter).__module__
    filt = _FILTERS.get(key)
    if filt is None:
        filt = _FILTERS[key] = _OutageFilter()
        for name in dict.fromkeys([key, *modules]):
            logging.getLogger(name).addFilter(filt)
    return filt


class Outage:
    """One destination's outage state: one warning when it starts, one line when it ends.

    While open, the exporter's own repeated error logs are muted. Spans and metrics
    each keep one (metric export errors are muted like span export errors).
    """

    def __init__(self, signal: str, exporter: object) -> None:
        self.signal = signal
        self.target = target_of(exporter)
        self.since: float | None = None
        self._filter = _outage_filter(exporter)

    def failed(self, error: str | None, detail: str = "") -> None:
        if self.since is None:
            self.since = time.monotonic()
            self._filter.quiet += 1
            _log.warning(
                "lens_rl: %s export to %s failing (%s)%s; the exporter's repeated errors are muted until it recovers",
                self.signal,
                self.target,
                error,
                detail,
            )

    def recovered(self) -> None:
        if self.since is not None:
            _log.warning(
                "lens_rl: %s export to %s recovered after %.1f s",
                self.signal,
                self.target,
                time.monotonic() - self.since,
            )
            self.close()

    def mute(self) -> None:
        """The exporter's error logs muted, no warning: for an export that outlives its pipeline's close."""
        if self.since is None:
            self.since = time.monotonic()
            self._filter.quiet += 1

    def close(self) -> None:
        if self.since is not None:
            self.since = None
            self._filter.quiet = max(self._filter.quiet - 1, 0)


def target_of(exporter: object) -> str:
    """A short description of where ``exporter`` sends data: its endpoint or file, credentials masked."""
    where = endpoint_of(exporter) or getattr(exporter, "path", None)
    return mask_url(clean_text(where)) if where else type(exporter).__name__


def verdict(status: object, batch_size: int) -> str:
    """What a failed export of ``batch_size`` spans is worth, by its HTTP status (an int), :data:`UNSENT`
    (nothing was sent: the batch could not be encoded, or is too large to send) or None (no answer):
    ``retry``, ``split`` (too large, more than one span) or ``drop`` (rejected for good)."""
    if status != UNSENT and not (isinstance(status, int) and status not in RETRYABLE_STATUS):
        return "retry"
    return "split" if status in (UNSENT, 413) and batch_size > 1 else "drop"


def backoff(first_s: float = 0.25, cap_s: float = 5.0) -> Iterator[float]:
    """The waits between retries: doubling from ``first_s``, capped at ``cap_s``."""
    wait = first_s
    while True:
        yield wait
        wait = min(wait * 2, cap_s)
