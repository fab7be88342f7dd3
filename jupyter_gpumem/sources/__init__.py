"""Where readings come from: one adapter per outside system, each answering in model types.

- ``nvml``: the NVIDIA driver through NVML (``pynvml``), the only module that imports it
- ``libcuda``: the CUDA driver's default memory pool (cuda_async), the only ctypes user
- ``jax_backend``: JAX's backend, its GPU plugin options and each device's allocator statistics
- ``jax_arrays``: live arrays and their sizes, read without touching a buffer
- ``replay``: a recorded trace, served as a Timeline

Each catches its outside system's errors once and answers ``NotAvailable(code, reason)``.
"""
