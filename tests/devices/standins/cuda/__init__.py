"""A stand-in for NVIDIA's ``cuda-python`` (``cuda.bindings.runtime``): only the CUDA profiler API, logged."""
