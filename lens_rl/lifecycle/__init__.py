"""Starting and stopping telemetry: driver, workers, flush, shutdown, exit and fork.

* :func:`init_telemetry_driver` — once on the driver, before ``ray.init()``: validates,
  projects the config into ``LENS_RL_OTEL_*`` env vars (``setdefault``: raw env wins),
  opens the job root span ``rl.job`` and exports its context as ``TRACEPARENT``.
* :func:`init_telemetry_worker` — once per worker process, from the environment only.
  Never raises: a bad value logs one warning and leaves telemetry off.
* :func:`shutdown_telemetry` / :func:`flush_telemetry` — bounded by ``timeout_ms``.

Fork rule: a forked child starts with telemetry reset. Its first phase initialises it
again from the inherited environment, under the child's own pid and its own file; the
parent's queued spans stay with the parent. A ``multiprocessing`` child flushes at
its exit (it skips ``atexit``); a child made by a bare ``os.fork`` should call
:func:`shutdown_telemetry` before ``os._exit``. In a child ``lens-rl run`` wove (every process but the
driver: ``Pool`` workers, Ray actors, which may be killed without ``atexit`` once they replied), the ended
spans are written out whenever the process's last open phase ends (bounded; off after one that could not
settle: a hung collector costs one phase once).

Example::

    handle = lens_rl.init_telemetry_driver(master_config, algorithm="grpo")
    ray.init()
    ...
    lens_rl.shutdown_telemetry(timeout_ms=5000)
"""

from __future__ import annotations

from lens_rl.lifecycle.environ import telemetry_enabled_in_env, vllm_native_tracing_requested
from lens_rl.lifecycle.start import activate, get_telemetry_handle, init_telemetry_driver, init_telemetry_worker
from lens_rl.lifecycle.stop import flush_telemetry, shutdown_telemetry

__all__ = [
    "activate",
    "flush_telemetry",
    "get_telemetry_handle",
    "init_telemetry_driver",
    "init_telemetry_worker",
    "shutdown_telemetry",
    "telemetry_enabled_in_env",
    "vllm_native_tracing_requested",
]
