"""Which sampled device a process's GPU is: its UUID on the process's own host.

A sample file names its devices by UUID under its header's ``host``; a process names its GPUs by UUID
(``rl.gpu.uuids``) beside its ``host.name``. Two hosts may report one UUID (the stand-in NVML's defaults on
every node, cloned VMs), so a device is one (host, UUID): its key is the UUID where no other host sampled that
UUID, else ``"<uuid>@<host>"`` (:func:`device_keys`), and a process's UUIDs are joined to its own host's devices
only (:func:`on_host`; a process with no ``host.name``, or a device whose header names none: by UUID alone).

Example::

    keys = device_keys([("n0", "GPU-0"), ("n1", "GPU-0"), ("n0", "GPU-1")])
    # {("n0", "GPU-0"): "GPU-0@n0", ("n1", "GPU-0"): "GPU-0@n1", ("n0", "GPU-1"): "GPU-1"}
    on_host(("GPU-0",), "n1", devices)   # ("GPU-0@n1",)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["device_keys", "on_host"]


def device_keys(pairs: Iterable[tuple[Any, str]]) -> dict[tuple[Any, str], str]:
    """Each sampled (host, UUID)'s device key: the UUID where it was sampled on one host only, else
    ``"<uuid>@<host>"``."""
    hosts: dict[str, dict[Any, None]] = {}  # (in the order given)
    for host, uuid in pairs:
        hosts.setdefault(uuid, {})[host] = None
    return {(host, uuid): uuid if len(on) == 1 else f"{uuid}@{host}" for uuid, on in hosts.items() for host in on}


def on_host(uuids: Sequence[str], host: Any, devices: Mapping[str, Any]) -> tuple[str, ...]:
    """The keys of ``devices`` (each with ``uuid`` and ``host``) that a process on ``host`` naming ``uuids`` uses:
    its own host's; a UUID sampled on other hosts only is named apart (``"<uuid>@<host>"``, sampled nowhere), a
    UUID sampled nowhere stays as it is. With no host: by UUID alone (the first host's where several sampled it)."""
    out: list[str] = []
    for uuid in uuids:
        if not isinstance(host, str) or not host:
            key = uuid if uuid in devices else next((k for k, d in devices.items() if d.uuid == uuid), uuid)
        elif f"{uuid}@{host}" in devices:
            key = f"{uuid}@{host}"
        elif uuid in devices and devices[uuid].host and devices[uuid].host != host:
            key = f"{uuid}@{host}"  # (another host's device of that UUID: none sampled on this one)
        else:
            key = uuid
        out.append(key)
    return tuple(dict.fromkeys(out))
