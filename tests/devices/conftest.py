"""The GPU sampler's tests run jobs of real processes over the stand-in NVML."""

from tests.gpu_jobs import job  # noqa: F401 (the fixture)
