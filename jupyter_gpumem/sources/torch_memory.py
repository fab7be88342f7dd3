"""How much GPU memory PyTorch's caching allocator holds in this process, read only where torch
is already imported and has started CUDA (never imports torch, never starts CUDA for it).

``torch.cuda.memory_stats(device)`` flattens the allocator's statistics into keys such as
``reserved_bytes.all.current`` (what it holds from CUDA, cached blocks included) and
``allocated_bytes.all.current`` (what tensors use); it answers ``{}`` before CUDA is initialised
(``memory_stats_as_nested_dict`` checks ``is_initialized()``, torch/cuda/memory.py).
"""

from __future__ import annotations

import sys

from jupyter_gpumem.core.readings import TorchDeviceReading

RESERVED = "reserved_bytes.all.current"
ALLOCATED = "allocated_bytes.all.current"


def read_torch() -> tuple[TorchDeviceReading, ...]:
    """One reading per CUDA device torch can see; () without torch or before it starts CUDA."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    started = getattr(cuda, "is_initialized", None)
    if not callable(started) or not started():
        return ()
    readings = []
    for ordinal in range(int(cuda.device_count())):
        stats = cuda.memory_stats(ordinal)
        reserved, allocated = stats.get(RESERVED), stats.get(ALLOCATED)
        if isinstance(reserved, int) and isinstance(allocated, int):
            readings.append(TorchDeviceReading(ordinal, reserved, allocated))
    return tuple(readings)
